package ociimage

import "runtime"

// goarch is the architecture of the binary the image carries: make image builds it for
// the machine it runs on.
func goarch() string { return runtime.GOARCH }
