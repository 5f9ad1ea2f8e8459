// The pod sandbox's first process (Kubernetes' "pause" container): it holds the pod's namespaces and waits to be
// told to stop. Built static into a one-file image by build.sh, so the test node needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
