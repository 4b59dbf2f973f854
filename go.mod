module github.com/goiwarp/iwarp

go 1.26.8

require (
	github.com/pion/transport/v3 v3.1.1
	github.com/pkg/profile v1.7.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/felixge/fgprof v0.9.3 // indirect
	github.com/google/pprof v0.0.0-20211214055906-6f57359322fd // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
