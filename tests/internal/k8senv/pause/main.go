// Command pause is the test cluster's sandbox ("pause") image: it holds a pod's namespaces
// and sleeps until it is told to stop. Nothing can be pulled on the test machines, so
// internal/k8senv builds it from here and imports it into containerd.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
