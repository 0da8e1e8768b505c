package driver

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountOptionPattern is one mount option as the kernel and mount(8) parse an option list: a name, optionally
// "=value". Whitespace, quotes, ";" and the like are never part of a valid option.
var mountOptionPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:=[A-Za-z0-9_.:/@+-]+)?$`)

// deniedMountOptions change what is mounted or how mount(8) goes about it, rather than how the volume is
// mounted; they are the driver's to choose.
var deniedMountOptions = map[string]bool{
	"bind": true, "rbind": true, "move": true, "remount": true, "loop": true, "offset": true, "sizelimit": true,
	"encryption": true, "helper": true, "owner": true, "user": true, "users": true, "group": true,
}

// checkMountFlags validates the mount flags of a volume capability: each a well-formed option or comma-separated
// list of options, none that the driver controls, and no "rw" on a read-only publish (it would come after "ro"
// and win). A malformed flag is InvalidArgument, at stage and at publish alike, never dropped.
func checkMountFlags(flags []string, readOnly bool) error {
	for _, flag := range flags {
		for _, opt := range strings.Split(flag, ",") {
			if err := checkMountOption(opt, readOnly); err != nil {
				return status.Errorf(codes.InvalidArgument, "mount flag %q: %v", flag, err)
			}
		}
	}
	return nil
}

func checkMountOption(opt string, readOnly bool) error {
	if !mountOptionPattern.MatchString(opt) {
		return fmt.Errorf("%q is not a mount option (name or name=value, letters, digits and _.-:/@+)", opt)
	}
	name, _, _ := strings.Cut(opt, "=")
	lower := strings.ToLower(name)
	if deniedMountOptions[lower] || strings.HasPrefix(lower, "x-") {
		return fmt.Errorf("option %q is chosen by the driver, not by the volume capability", name)
	}
	if readOnly && lower == "rw" {
		return fmt.Errorf("option rw contradicts a read-only publish")
	}
	return nil
}
