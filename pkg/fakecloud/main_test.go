package fakecloud_test

import (
	"flag"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain keeps fakecloud's info logs out of test output unless -v is given; errors still show.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		klog.LogToStderr(false)
		klog.SetOutputBySeverity("INFO", io.Discard)
		klog.SetOutputBySeverity("WARNING", io.Discard)
		klog.SetOutputBySeverity("ERROR", os.Stderr)
	}
	os.Exit(m.Run())
}
