module github.com/chatgate/chatgate

go 1.26.0

require gopkg.in/yaml.v3 v3.0.1

require (
	github.com/kr/pretty v0.3.0 // indirect
	gopkg.in/check.v1 v1.0.0-20201130134442-10cb98267c6c // indirect
)
