package browser

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-rod/rod/lib/proto"
)

// interactive roles get an [eN] id that click, fill and select accept.
var interactive = map[string]bool{
	"button": true, "link": true, "textbox": true, "searchbox": true, "combobox": true,
	"checkbox": true, "radio": true, "switch": true, "slider": true, "spinbutton": true,
	"menuitem": true, "menuitemcheckbox": true, "menuitemradio": true, "tab": true,
	"option": true, "listbox": true, "treeitem": true, "textField": true, "TextField": true,
	"PopUpButton": true, "ComboBoxSelect": true, "ComboBoxMenuButton": true,
}

// flattened roles carry no meaning for a reader: their children take
// their place.
var flattened = map[string]bool{
	"generic": true, "none": true, "presentation": true, "InlineTextBox": true,
	"LineBreak": true, "LayoutTable": true, "LayoutTableRow": true, "LayoutTableCell": true,
	"": true,
}

// shownProps are the node properties worth a reader's attention.
var shownProps = []string{"checked", "selected", "pressed", "expanded", "disabled", "required", "focused", "level", "readonly", "invalid"}

const maxNameChars = 200

// formatAXTree writes the accessibility tree one node a line, indented by
// depth; tag names the interactive nodes. It stops at maxChars and says
// how many nodes were left out.
func formatAXTree(nodes []*proto.AccessibilityAXNode, tag func(proto.DOMBackendNodeID) string, maxChars int) (string, bool) {
	byID := make(map[proto.AccessibilityAXNodeID]*proto.AccessibilityAXNode, len(nodes))
	for _, n := range nodes {
		if n != nil {
			byID[n.NodeID] = n
		}
	}
	w := &treeWriter{byID: byID, tag: tag, max: maxChars, seen: map[proto.AccessibilityAXNodeID]bool{}}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if _, ok := byID[n.ParentID]; n.ParentID == "" || !ok {
			w.node(n, 0, "")
		}
	}
	if w.cut > 0 {
		fmt.Fprintf(&w.b, "[... %d more nodes: the tree is capped at %d characters]\n", w.cut, maxChars)
	}
	return w.b.String(), w.cut > 0
}

type treeWriter struct {
	b    strings.Builder
	byID map[proto.AccessibilityAXNodeID]*proto.AccessibilityAXNode
	tag  func(proto.DOMBackendNodeID) string
	max  int
	cut  int // nodes not written
	seen map[proto.AccessibilityAXNodeID]bool
}

// maxDepth bounds indentation (and recursion) on pathological pages.
const maxDepth = 64

func (w *treeWriter) node(n *proto.AccessibilityAXNode, depth int, parentName string) {
	if w.seen[n.NodeID] {
		return // a cycle in what the page's renderer sent
	}
	w.seen[n.NodeID] = true
	role := axString(n.Role)
	name := oneLine(axString(n.Name))
	show := !n.Ignored && !flattened[role]
	if role == "StaticText" && (name == "" || strings.Contains(parentName, name)) {
		show = false
	}
	childDepth, childParent := depth, parentName
	if show {
		line := w.line(n, role, name, depth)
		if w.b.Len()+len(line) > w.max {
			w.cut++
		} else {
			w.b.WriteString(line)
		}
		childDepth, childParent = min(depth+1, maxDepth), name
	}
	for _, id := range n.ChildIDs {
		if c := w.byID[id]; c != nil {
			w.node(c, childDepth, childParent)
		}
	}
}

func (w *treeWriter) line(n *proto.AccessibilityAXNode, role, name string, depth int) string {
	var b strings.Builder
	b.WriteString(strings.Repeat("  ", depth))
	if interactive[role] && n.BackendDOMNodeID != 0 && w.tag != nil {
		if id := w.tag(n.BackendDOMNodeID); id != "" {
			b.WriteString("[" + id + "] ")
		}
	}
	if role == "StaticText" {
		role = "text"
	}
	b.WriteString(role)
	if name != "" {
		b.WriteString(" " + strconv.Quote(name))
	}
	if v := oneLine(axString(n.Value)); v != "" {
		b.WriteString(" value=" + strconv.Quote(v))
	}
	for _, want := range shownProps {
		for _, p := range n.Properties {
			if p == nil || string(p.Name) != want || p.Value == nil {
				continue
			}
			v := axString(p.Value)
			switch {
			case v == "true":
				b.WriteString(" " + want)
			case v == "false" && want != "expanded":
			case v == "" || v == "false" && want == "expanded":
				if v != "" {
					b.WriteString(" " + want + "=" + v)
				}
			default:
				b.WriteString(" " + want + "=" + v)
			}
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// axString is a value as text: strings as they are, other JSON as JSON.
func axString(v *proto.AccessibilityAXValue) string {
	if v == nil || v.Value.Nil() {
		return ""
	}
	if s, ok := v.Value.Val().(string); ok {
		return s
	}
	return v.Value.JSON("", "")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxNameChars {
		cut := maxNameChars
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
