// Package openapispec reads what sandboxd's tests check of
// docs/openapi.yaml: the operations and their statuses, the error codes,
// the schemas' fields and the observation kinds. There is no YAML library
// in go.mod, so Parse is a small extractor that relies on how the
// document is written (and fails loudly when a line does not fit, instead
// of guessing):
//   - block style with two-space indentation, no tabs, no flow mappings or
//     multi-line plain/quoted scalars in the parts it reads;
//   - block scalars (`key: |`, `key: >-`, `- |`) are skipped whole: every
//     following line indented deeper than the line that opened them;
//   - `paths:` is a top-level key; each path is a key indented exactly 2
//     spaces ("  /v1/x/{id}:"), each operation a key indented exactly 4
//     spaces named after an HTTP method ("    get:"), and the statuses are
//     the keys indented exactly 8 spaces under the operation's
//     "      responses:" ("        \"200\":", "        '404':",
//     "        200:" or "default:");
//   - the error codes are the block list (or flow list) under `enum:`
//     below `code:` in components/schemas/Error;
//   - each schema is a key indented exactly 4 spaces under
//     "  schemas:" in components; its required fields are the flow list
//     "      required: [a, b]" and its properties the keys indented exactly
//     8 spaces under "      properties:";
//   - the observation kinds are the "kind: \"#/components/schemas/X\""
//     entries indented exactly 10 spaces under "        mapping:" in the
//     discriminator of components/schemas/Observation.
package openapispec

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// document names the document in errors.
const document = "docs/openapi.yaml"

// Spec is what the test reads of the document.
type Spec struct {
	// ops maps "METHOD /path/{template}" to the response statuses listed.
	Ops        map[string][]string
	ErrorCodes []string
	// schemas are the fields of components/schemas, by name.
	Schemas map[string]*Schema
	// observations maps an observation kind to its schema's name.
	Observations map[string]string
}

// Schema is what the test reads of a schema.
type Schema struct {
	Required, Properties []string
}

type line struct {
	n, indent int
	text      string // without the indentation and trailing blanks
}

var (
	blockScalar = regexp.MustCompile(`(?:^-|:)\s+[|>][-+1-9]*$`)
	pathKey     = regexp.MustCompile(`^(/[^\s:'"]*):$`)
	statusKey   = regexp.MustCompile(`^(?:"([1-5][0-9][0-9]|default)"|'([1-5][0-9][0-9]|default)'|([1-5][0-9][0-9]|default)):$`)
	methods     = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
)

// lines splits the document into its significant lines: no blanks,
// no comments, no block scalar content.
func lines(data string) ([]line, error) {
	var out []line
	block := -1 // indentation of the line that opened a block scalar
	for i, raw := range strings.Split(data, "\n") {
		raw = strings.TrimRight(raw, " \r")
		text := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(text)
		if block >= 0 {
			if text == "" || indent > block {
				continue
			}
			block = -1
		}
		if text == "" || text[0] == '#' {
			continue
		}
		if text[0] == '\t' {
			return nil, lineError(i+1, "a tab in the indentation")
		}
		out = append(out, line{n: i + 1, indent: indent, text: text})
		if blockScalar.MatchString(text) {
			block = indent
		}
	}
	return out, nil
}

// lineError reports a line of the document (0: the document as a whole)
// the extractor cannot read.
func lineError(n int, format string, args ...any) error {
	if n == 0 {
		return fmt.Errorf("%s: %s", document, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s:%d: %s", document, n, fmt.Sprintf(format, args...))
}

// section returns the lines below the key text at indent within ls,
// up to the next line indented as much or less.
func section(ls []line, indent int, text string) ([]line, int, bool) {
	for i, l := range ls {
		if l.indent != indent || l.text != text {
			continue
		}
		end := i + 1
		for end < len(ls) && ls[end].indent > indent {
			end++
		}
		return ls[i+1 : end], l.n, true
	}
	return nil, 0, false
}

// Parse extracts the operations and error codes of the document.
func Parse(data string) (*Spec, error) {
	ls, err := lines(data)
	if err != nil {
		return nil, err
	}
	spec := &Spec{Ops: map[string][]string{}}

	paths, n, ok := section(ls, 0, "paths:")
	if !ok {
		return nil, lineError(0, "no top-level paths: block")
	}
	if len(paths) == 0 {
		return nil, lineError(n, "the paths: block is empty")
	}
	seenPath := map[string]bool{}
	var path, op string
	inResponses := false
	for _, l := range paths {
		if l.indent%2 != 0 {
			return nil, lineError(l.n, "odd indentation %d", l.indent)
		}
		switch {
		case l.indent == 2:
			m := pathKey.FindStringSubmatch(l.text)
			if m == nil {
				return nil, lineError(l.n, "expected a path key like \"  /v1/x:\", got %q", l.text)
			}
			path, op, inResponses = m[1], "", false
			if seenPath[path] {
				return nil, lineError(l.n, "path %s twice", path)
			}
			seenPath[path] = true
		case l.indent == 4:
			op, inResponses = "", false
			key, rest, _ := strings.Cut(l.text, ":")
			if !slices.Contains(methods, key) {
				continue // parameters, summary, ...
			}
			if rest != "" {
				return nil, lineError(l.n, "operation %s of %s is not a block mapping", key, path)
			}
			op = strings.ToUpper(key) + " " + path
			if _, dup := spec.Ops[op]; dup {
				return nil, lineError(l.n, "operation %s twice", op)
			}
			spec.Ops[op] = nil
		case l.indent == 6 && op != "":
			inResponses = l.text == "responses:"
		case l.indent == 8 && inResponses:
			m := statusKey.FindStringSubmatch(l.text)
			if m == nil {
				return nil, lineError(l.n, "expected a status key under responses of %s, got %q", op, l.text)
			}
			status := m[1] + m[2] + m[3]
			if slices.Contains(spec.Ops[op], status) {
				return nil, lineError(l.n, "status %s of %s twice", status, op)
			}
			spec.Ops[op] = append(spec.Ops[op], status)
		}
	}
	for op, statuses := range spec.Ops {
		if len(statuses) == 0 {
			return nil, lineError(0, "operation %s lists no responses", op)
		}
	}

	comps, _, ok := section(ls, 0, "components:")
	if !ok {
		return nil, lineError(0, "no top-level components: block")
	}
	schemas, n, ok := section(comps, 2, "schemas:")
	if !ok {
		return nil, lineError(n, "no schemas: in components")
	}
	if err := errorCodesOf(spec, schemas, n); err != nil {
		return nil, err
	}
	if err := schemasOf(spec, schemas); err != nil {
		return nil, err
	}
	return spec, nil
}

// errorCodesOf reads the code enum of the Error schema.
func errorCodesOf(spec *Spec, schemas []line, schemasLine int) error {
	errSchema, n, ok := section(schemas, 4, "Error:")
	if !ok {
		return lineError(schemasLine, "no Error schema in components/schemas")
	}
	ci := slices.IndexFunc(errSchema, func(l line) bool { return l.text == "code:" })
	if ci < 0 {
		return lineError(n, "the Error schema has no code: property")
	}
	code := errSchema[ci]
	for i := ci + 1; i < len(errSchema) && errSchema[i].indent > code.indent; i++ {
		l := errSchema[i]
		rest, ok := strings.CutPrefix(l.text, "enum:")
		if !ok {
			continue
		}
		if rest = strings.TrimSpace(rest); rest != "" {
			flow, ok := strings.CutPrefix(rest, "[")
			if flow, ok2 := strings.CutSuffix(flow, "]"); ok && ok2 {
				for _, v := range strings.Split(flow, ",") {
					spec.ErrorCodes = append(spec.ErrorCodes, unquote(v))
				}
				return nil
			}
			return lineError(l.n, "enum of code is neither a block nor a flow list: %q", rest)
		}
		for _, item := range errSchema[i+1:] {
			v, ok := strings.CutPrefix(item.text, "- ")
			if !ok || item.indent < l.indent {
				break
			}
			spec.ErrorCodes = append(spec.ErrorCodes, unquote(v))
		}
		return nil
	}
	return lineError(code.n, "the code property of the Error schema has no enum")
}

// schemasOf reads the required fields and the properties of each
// schema, and the kinds of the Observation schema's discriminator.
func schemasOf(spec *Spec, schemas []line) error {
	spec.Schemas = map[string]*Schema{}
	var cur *Schema
	inProps := false
	for _, l := range schemas {
		switch {
		case l.indent == 4:
			name, rest, _ := strings.Cut(l.text, ":")
			if rest != "" || name == "" {
				return lineError(l.n, "expected a schema key like \"    Name:\", got %q", l.text)
			}
			cur, inProps = &Schema{}, false
			spec.Schemas[name] = cur
		case l.indent == 6:
			inProps = l.text == "properties:"
			if rest, ok := strings.CutPrefix(l.text, "required:"); ok {
				list, ok := flowList(rest)
				if !ok {
					return lineError(l.n, "required is not a flow list like [a, b]: %q", l.text)
				}
				cur.Required = list
			}
		case l.indent == 8 && inProps:
			key, _, _ := strings.Cut(l.text, ":")
			cur.Properties = append(cur.Properties, unquote(key))
		}
	}
	obs, n, ok := section(schemas, 4, "Observation:")
	if !ok {
		return lineError(0, "no Observation schema in components/schemas")
	}
	mi := slices.IndexFunc(obs, func(l line) bool { return l.indent == 8 && l.text == "mapping:" })
	if mi < 0 {
		return lineError(n, "the Observation schema has no discriminator mapping")
	}
	spec.Observations = map[string]string{}
	for _, l := range obs[mi+1:] {
		if l.indent <= 8 {
			break
		}
		kind, ref, ok := strings.Cut(l.text, ":")
		name, isRef := strings.CutPrefix(unquote(ref), "#/components/schemas/")
		if !ok || l.indent != 10 || !isRef {
			return lineError(l.n, `expected a mapping entry like kind: "#/components/schemas/X", got %q`, l.text)
		}
		spec.Observations[unquote(kind)] = name
	}
	return nil
}

// flowList reads a flow list of plain or quoted scalars.
func flowList(v string) ([]string, bool) {
	v = strings.TrimSpace(v)
	inner, ok := strings.CutPrefix(v, "[")
	if inner, ok2 := strings.CutSuffix(inner, "]"); ok && ok2 {
		var out []string
		for _, item := range strings.Split(inner, ",") {
			if item = unquote(item); item != "" {
				out = append(out, item)
			}
		}
		return out, true
	}
	return nil, false
}

// CheckObservation checks an observation as the daemon answered it against
// its kind's schema: every required field, and no field the schema does
// not have.
func (spec *Spec) CheckObservation(body []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return fmt.Errorf("the observation is not a JSON object: %w", err)
	}
	var kind string
	_ = json.Unmarshal(fields["kind"], &kind)
	name, ok := spec.Observations[kind]
	if !ok {
		return fmt.Errorf("an observation of kind %q, which the Observation schema's discriminator does not map", kind)
	}
	schema := spec.Schemas[name]
	if schema == nil {
		return fmt.Errorf("the Observation schema maps %q to %s, which is not in components/schemas", kind, name)
	}
	for _, f := range schema.Required {
		if _, ok := fields[f]; !ok {
			return fmt.Errorf("the %s observation has no %q, which %s requires: %s", kind, f, name, body)
		}
	}
	for f := range fields {
		if !slices.Contains(schema.Properties, f) {
			return fmt.Errorf("the %s observation has %q, which %s does not list: %s", kind, f, name, body)
		}
	}
	return nil
}

func unquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}
