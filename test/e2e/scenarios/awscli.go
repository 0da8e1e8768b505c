//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// awsCLIPath is the AWS CLI v2 of Debian's awscli (hack/deps.sh installs it): the scenarios act on the cloud
// outside Kubernetes the way an operator does.
const awsCLIPath = "/usr/bin/aws"

// awsCLI runs the AWS CLI against fakecloud with the run's keys, ignoring the user's own configuration.
type awsCLI struct {
	endpoint string
	env      []string
}

func (r *run) awsCLI(t testing.TB) *awsCLI {
	t.Helper()
	if env.cloudURL == "" {
		t.Fatal("the scenario acts on the cloud with the AWS CLI: it needs fakecloud's URL")
	}
	if _, err := os.Stat(awsCLIPath); err != nil {
		t.Fatalf("AWS CLI: %v (hack/deps.sh test installs awscli)", err)
	}
	e := append(os.Environ(), "AWS_ACCESS_KEY_ID="+env.cloud.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+env.cloud.SecretAccessKey,
		"AWS_DEFAULT_REGION="+cloudRegion, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
	if env.cloud.AccessKeyID == "" {
		// fakecloud without keys accepts any signature; the CLI still wants some.
		e = append(e, "AWS_ACCESS_KEY_ID=e2e", "AWS_SECRET_ACCESS_KEY=e2e")
	}
	return &awsCLI{endpoint: env.cloudURL, env: e}
}

// run runs `aws <args> --endpoint-url … --output json` and returns its standard output.
func (c *awsCLI) run(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, awsCLIPath, append(args, "--endpoint-url", c.endpoint, "--output", "json")...)
	cmd.Env = c.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("aws %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// createVolume creates a 1 GiB gp3 volume in zone, named for the run, and waits until it is available.
func (c *awsCLI) createVolume(t testing.TB, zone, name string) string {
	t.Helper()
	out, err := c.run(t.Context(), "ec2", "create-volume", "--availability-zone", zone, "--size", "1", "--volume-type", "gp3",
		"--tag-specifications", fmt.Sprintf("ResourceType=volume,Tags=[{Key=Name,Value=%q}]", name))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ VolumeId string }
	if err := json.Unmarshal(out, &v); err != nil || v.VolumeId == "" {
		t.Fatalf("create-volume answered %q: %v", out, err)
	}
	if _, err := c.run(t.Context(), "ec2", "wait", "volume-available", "--volume-ids", v.VolumeId); err != nil {
		t.Fatal(err)
	}
	return v.VolumeId
}

// attachVolume attaches the volume to the instance as device and waits until it is in use.
func (c *awsCLI) attachVolume(t testing.TB, volumeID, instanceID, device string) {
	t.Helper()
	if _, err := c.run(t.Context(), "ec2", "attach-volume", "--volume-id", volumeID, "--instance-id", instanceID,
		"--device", device); err != nil {
		t.Fatal(err)
	}
	if _, err := c.run(t.Context(), "ec2", "wait", "volume-in-use", "--volume-ids", volumeID); err != nil {
		t.Fatal(err)
	}
}

// restartInstance stops the instance and starts it again, waiting for each, as an operator does with the AWS
// CLI; volumes stay attached through it. Instance metadata lists the volumes attached as of the start.
func (c *awsCLI) restartInstance(t testing.TB, instanceID string) {
	t.Helper()
	t.Cleanup(func() {
		// A test that failed half-way leaves no node's instance stopped.
		if _, err := c.run(context.Background(), "ec2", "start-instances", "--instance-ids", instanceID); err != nil {
			t.Logf("start instance %s: %v", instanceID, err)
		}
	})
	for _, step := range []struct{ action, state string }{{"stop-instances", "stopped"}, {"start-instances", "running"}} {
		if _, err := c.run(t.Context(), "ec2", step.action, "--instance-ids", instanceID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "instance "+instanceID+" "+step.state, func(ctx context.Context) (bool, string, error) {
			out, err := c.run(ctx, "ec2", "describe-instances", "--instance-ids", instanceID,
				"--query", "Reservations[0].Instances[0].State.Name")
			if err != nil {
				return false, "", err
			}
			var state string
			if err := json.Unmarshal(out, &state); err != nil {
				return false, "", err
			}
			return state == step.state, state, nil
		})
	}
}

// releaseVolumes detaches and deletes the volumes, waiting for each step, and logs what it could not do.
func (c *awsCLI) releaseVolumes(t testing.TB, ids []string) {
	ctx := context.Background()
	for _, id := range ids {
		if _, err := c.run(ctx, "ec2", "detach-volume", "--volume-id", id); err != nil {
			t.Logf("%v", err)
		}
	}
	if len(ids) == 0 {
		return
	}
	if _, err := c.run(ctx, append([]string{"ec2", "wait", "volume-available", "--volume-ids"}, ids...)...); err != nil {
		t.Errorf("%v", err)
	}
	for _, id := range ids {
		if _, err := c.run(ctx, "ec2", "delete-volume", "--volume-id", id); err != nil {
			t.Errorf("%v", err)
		}
	}
}
