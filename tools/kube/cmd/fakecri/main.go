// Command fakecri serves the in-memory fake CRI runtime and image services
// from k8s.io/cri-client/pkg/fake on a unix socket, so that a real kubelet can
// run (and exercise its volume manager) without a container runtime.
// Pods it "runs" report Running, but no process is ever started.
//
// Usage: fakecri --socket /run/diskforge-e2e/fakecri.sock
//
// Point the kubelet's containerRuntimeEndpoint and imageServiceEndpoint at
// unix://<socket>. The server runs until SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	fakeremote "k8s.io/cri-client/pkg/fake"
)

func main() {
	socket := flag.String("socket", "", "path of the unix socket to serve the fake CRI on (required)")
	imageSize := flag.Uint64("image-size", 1024, "size in bytes reported for every fake image")
	flag.Parse()

	if err := run(*socket, *imageSize); err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: %v\n", err)
		os.Exit(1)
	}
}

func run(socket string, imageSize uint64) error {
	if socket == "" {
		return fmt.Errorf("--socket is required")
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return err
	}

	rt := fakeremote.NewFakeRemoteRuntime()
	// The fake image service reports size 0 by default, which the kubelet's
	// image garbage collector and node status handle badly.
	rt.ImageService.SetFakeImageSize(imageSize)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	if err := rt.Start("unix://" + abs); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fakecri: serving on unix://%s\n", abs)

	sig := <-sigs
	fmt.Fprintf(os.Stderr, "fakecri: %v received, stopping\n", sig)
	rt.Stop()
	if err := os.Remove(abs); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
