package fuseblock

import (
	"context"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Reporter is a Policy with something to tell about a volume. Its text is served, read-only, as the hidden
// file ReportName(<id><Suffix>) beside the volume's file, for readers that see the mount but do not talk to
// fakecloud's API: a node plugin on the same machine, which finds the mount through its loop device's backing
// file. The file exists while some reporter has a report; every read gives the report of that moment.
type Reporter interface {
	// Report returns the volume's lines ("key value\n"), or false when there is nothing to tell (yet). Its
	// length must not change from call to call for a volume, so that the file's size holds between its stat
	// and its read.
	Report(volumeID string) ([]byte, bool)
}

// ReportName is the name of the report file of a served file name: ".<name>.report".
func ReportName(name string) string { return "." + name + reportSuffix }

const reportSuffix = ".report"

// reportOf maps a report file's name to its volume ID.
func (f *FS) reportOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return "", false
	}
	if rest, ok = strings.CutSuffix(rest, reportSuffix); !ok {
		return "", false
	}
	return f.volumeOf(rest)
}

// report is what the policy (or the policies of a Chain) reports of the volume.
func (f *FS) report(volumeID string) ([]byte, bool) {
	r, ok := f.policy.(Reporter)
	if !ok {
		return nil, false
	}
	return r.Report(volumeID)
}

// Report joins the reports of the chain's reporters, in order.
func (c chain) Report(volumeID string) ([]byte, bool) {
	var out []byte
	found := false
	for _, p := range c {
		if r, ok := p.(Reporter); ok {
			if b, ok := r.Report(volumeID); ok {
				out, found = append(out, b...), true
			}
		}
	}
	return out, found
}

// reportNode is a volume's report file.
type reportNode struct {
	fs.Inode
	fsys *FS
	id   string
}

var (
	_ fs.NodeOpener    = (*reportNode)(nil)
	_ fs.NodeGetattrer = (*reportNode)(nil)
	_ fs.NodeReader    = (*reportNode)(nil)
)

func (n *reportNode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	b, ok := n.fsys.report(n.id)
	if !ok {
		return syscall.ENOENT
	}
	out.Mode = syscall.S_IFREG | 0o444
	out.Nlink = 1
	out.Size = uint64(len(b))
	return 0
}

func (n *reportNode) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *reportNode) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, ok := n.fsys.report(n.id)
	if !ok {
		return nil, syscall.ENOENT
	}
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(b[off:min(int64(len(b)), off+int64(len(dest)))]), 0
}
