// Package docs holds the project's documentation; Go code uses one piece
// of it: the OpenAPI document the daemon serves at GET /v1/openapi.yaml.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml, the API's OpenAPI 3.1 document.
//
//go:embed openapi.yaml
var OpenAPI []byte
