package config

import (
	"fmt"
	"path/filepath"
)

// ProbeDirName is the directory under the root of a filesystem that the messages suggest
// when the measured path is that root: the one entry etcd then names in its start-up
// warning.
const ProbeDirName = "diskprobe"

// ProbeDirInside reports whether the target's probe files are inside its path, which
// inspect.ProbeDir accepts only directly under the root of a filesystem.
func (t *Target) ProbeDirInside() bool {
	return t.ProbeDir != "" && filepath.Dir(t.ProbeDir) == t.Path
}

// EtcdWarning is the warning etcd (3.4 and later) logs at each start about a probe
// directory inside its data directory, as etcd 3.4.23 prints it in JSON (zap, the default
// from 3.5; 3.4's default logger words it "found invalid file/dir NAME under data dir DIR
// (Ignore this if you are upgrading etcd)"). It is harmless: etcd looks only for member/
// there, and warns the same about the lost+found of an ext4 mounted there.
func (t *Target) EtcdWarning() string {
	return fmt.Sprintf(`"msg":"found invalid file under data directory","filename":%q,"data-dir":%q`, filepath.Base(t.ProbeDir), t.Path)
}
