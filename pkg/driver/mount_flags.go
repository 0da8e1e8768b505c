package driver

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountOptionPattern is one mount option as the kernel and mount(8) parse an option list: a name, optionally
// "=value". Whitespace, quotes, ";" and the like are never part of a valid option (SELinux contexts aside).
var mountOptionPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:=[A-Za-z0-9_.:/@+-]+)?$`)

// deniedMountOptions change what is mounted or how mount(8) goes about it, rather than how the volume is
// mounted; they are the driver's to choose.
var deniedMountOptions = map[string]bool{
	"bind": true, "rbind": true, "move": true, "remount": true, "loop": true, "offset": true, "sizelimit": true,
	"encryption": true, "helper": true, "owner": true, "user": true, "users": true, "group": true,
}

// seLinuxContextOptions set the SELinux labels of a filesystem (mount(8), "FILESYSTEM-INDEPENDENT MOUNT
// OPTIONS"). With the CSIDriver's seLinuxMount, kubelet adds context="<the pod's label>" to the mount flags of
// NodeStage and NodePublish. They label the superblock: the stage's mount sets them, a bind of it shares them.
var seLinuxContextOptions = map[string]bool{"context": true, "fscontext": true, "defcontext": true, "rootcontext": true}

// seLinuxContextPattern is an SELinux context, user:role:type with an optional MLS/MCS level or range
// (s0, s0:c0,c1, s0-s0:c0.c1023). Its commas are why kubelet and the kernel quote it.
var seLinuxContextPattern = regexp.MustCompile(`^[A-Za-z0-9_]+:[A-Za-z0-9_]+:[A-Za-z0-9_]+(?::[A-Za-z0-9_.,:-]+)?$`)

// errUnbalancedQuote is an option list whose double quotes do not pair up.
var errUnbalancedQuote = errors.New("unbalanced double quote")

// splitMountOptions splits a comma-separated option list as libmount does: a comma inside double quotes is
// part of the value (context="system_u:object_r:container_file_t:s0:c0,c1" is one option). Quotes are kept.
func splitMountOptions(list string) ([]string, error) {
	var opts []string
	start, quoted := 0, false
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				opts = append(opts, list[start:i])
				start = i + 1
			}
		}
	}
	if quoted {
		return nil, errUnbalancedQuote
	}
	return append(opts, list[start:]), nil
}

// checkMountFlags validates the mount flags of a volume capability: each a well-formed option or comma-separated
// list of options, none that the driver controls, an SELinux context option at most once, and no "rw" on a
// read-only publish (it would come after "ro" and win). A malformed flag is InvalidArgument, at stage and at
// publish alike, never dropped.
func checkMountFlags(flags []string, readOnly bool) error {
	contexts := map[string]string{}
	for _, flag := range flags {
		opts, err := splitMountOptions(flag)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "mount flag %q: %v", flag, err)
		}
		for _, opt := range opts {
			if err := checkMountOption(opt, readOnly); err != nil {
				return status.Errorf(codes.InvalidArgument, "mount flag %q: %v", flag, err)
			}
			name, value, _ := strings.Cut(opt, "=")
			if !seLinuxContextOptions[name] {
				continue
			}
			// Two labels for one superblock: the kernel would refuse the mount, less clearly.
			if prev, ok := contexts[name]; ok && prev != unquote(value) {
				return status.Errorf(codes.InvalidArgument, "mount flag %q: %s given twice (%q and %q)", flag, name, prev, unquote(value))
			}
			contexts[name] = unquote(value)
		}
	}
	return nil
}

func checkMountOption(opt string, readOnly bool) error {
	name, value, _ := strings.Cut(opt, "=")
	if seLinuxContextOptions[name] {
		return checkSELinuxContext(name, value)
	}
	if !mountOptionPattern.MatchString(opt) {
		return fmt.Errorf("%q is not a mount option (name or name=value, letters, digits and _.-:/@+)", opt)
	}
	lower := strings.ToLower(name)
	if deniedMountOptions[lower] || strings.HasPrefix(lower, "x-") {
		return fmt.Errorf("option %q is chosen by the driver, not by the volume capability", name)
	}
	if readOnly && lower == "rw" {
		return fmt.Errorf("option rw contradicts a read-only publish")
	}
	return nil
}

// checkSELinuxContext accepts an SELinux context, bare or in one pair of double quotes (as kubelet passes it);
// nothing else reaches mount(8) in its option list.
func checkSELinuxContext(name, value string) error {
	inner := value
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		inner = value[1 : len(value)-1]
	}
	if !seLinuxContextPattern.MatchString(inner) {
		return fmt.Errorf("%s=%q is not an SELinux context (user:role:type[:level], optionally in double quotes)", name, value)
	}
	return nil
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// seLinuxContexts are the SELinux context options of an option list (mount flags, or a mount's superblock
// options as mountinfo shows them), by name, unquoted. A list that does not split has none.
func seLinuxContexts(lists ...string) map[string]string {
	contexts := map[string]string{}
	for _, list := range lists {
		opts, err := splitMountOptions(list)
		if err != nil {
			continue
		}
		for _, opt := range opts {
			if name, value, ok := strings.Cut(opt, "="); ok && seLinuxContextOptions[name] {
				contexts[name] = unquote(value)
			}
		}
	}
	return contexts
}

// withoutSELinuxContexts is flags (checked) without their SELinux context options. A bind mount shares the
// superblock, labels and all, with its source: the labels are the stage's to set, and a bind carrying them
// would be remounted through mount(8) for options the kernel ignores on a bind.
func withoutSELinuxContexts(flags []string) []string {
	var out []string
	for _, flag := range flags {
		opts, err := splitMountOptions(flag)
		if err != nil {
			out = append(out, flag)
			continue
		}
		kept := opts[:0]
		for _, opt := range opts {
			if name, _, _ := strings.Cut(opt, "="); !seLinuxContextOptions[name] {
				kept = append(kept, opt)
			}
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, ","))
		}
	}
	return out
}

// seLinuxContextConflict describes how the SELinux labels a mount flags ask for differ from those the mounted
// filesystem shows in its superblock options; "" when they agree, or when the mount shows none (SELinux off on
// the host, where mount(8) drops the options, or a filesystem mounted without them).
func seLinuxContextConflict(flags []string, superOptions string) string {
	shown := seLinuxContexts(superOptions)
	if len(shown) == 0 {
		return ""
	}
	asked := seLinuxContexts(flags...)
	if maps.Equal(asked, shown) {
		return ""
	}
	return fmt.Sprintf("the mounted filesystem has SELinux labels %v, the mount flags ask for %v", shown, asked)
}
