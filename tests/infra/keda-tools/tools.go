//go:build tools

// Package tools pins KEDA's two commands in this module, so `go mod tidy` keeps what they need.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
