package fakecloud_test

import (
	"flag"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestMain keeps fakecloud's info logs out of test output unless -v is given; errors still show. It holds every
// test's EC2 traffic to EC2's service model (fakecloudtest.EnvCheckModel) unless told otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	if _, set := os.LookupEnv(fakecloudtest.EnvCheckModel); !set {
		_ = os.Setenv(fakecloudtest.EnvCheckModel, "1")
	}
	if !testing.Verbose() {
		klog.LogToStderr(false)
		klog.SetOutputBySeverity("INFO", io.Discard)
		klog.SetOutputBySeverity("WARNING", io.Discard)
		klog.SetOutputBySeverity("ERROR", os.Stderr)
	}
	os.Exit(m.Run())
}
