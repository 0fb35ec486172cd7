package main

import (
	"net/http"
	"net/http/pprof"
)

// servePprof serves the Go runtime's profiles under /debug/pprof/, and the landing page
// then links the heap and a 60 s CPU profile. It takes --web.enable-pprof: the exporter
// runs as a privileged daemon on every storage host, and a profile costs CPU while it
// runs and shows the process's internals (its command line among them) to whoever can
// reach the port. net/http/pprof stretches the server's WriteTimeout by a profile's length
// itself, so the landing page's 60 s profile is not cut off.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index) // and every named profile: heap, goroutine, allocs…
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol) // as go tool pprof asks
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
