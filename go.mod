module github.com/sandboxd/sandboxd

go 1.26.8

require (
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/tetratelabs/wazero v1.12.0
	github.com/valyala/fasthttp v1.78.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
)
