// The real node's sandbox ("pause") image: PID 1 of every pod sandbox, built by
// tests/infra/node_images.py into localhost/pause:3.10 because no registry is reachable.
// It holds the pod's namespaces open, reaps the children it inherits (pods with
// shareProcessNamespace), and exits on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
