//go:build !wasip1

// The native side of package durasync, for `go test`: every call is served
// by `durasync harness` (the host's own rules over temporary or given
// directories, a manifest's limits, dry runs, operation records) as JSON
// lines over pipes. A test starts one with [StartHarness]:
//
//	h, err := durasync.StartHarness(durasync.HarnessOptions{Roots: []string{"out"}})
//	if err != nil { t.Fatal(err) }
//	defer h.Close()
//	result := Run("{}", []byte("A=1\n"))   // the plugin's export, unchanged
//
// The binary is $DURASYNC, else `durasync` on PATH.

package durasync

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// MaxAnswerBytes is the longest answer line read back from the harness.
const MaxAnswerBytes = 64 << 20

var current *Harness

// HarnessOptions says what a harness session grants.
type HarnessOptions struct {
	// Roots each get a fresh temporary directory.
	Roots []string
	// RootDirs grants existing directories by name.
	RootDirs map[string]string
	// Manifest is a plugin.toml whose name, roots' access and limits apply.
	Manifest string
	// DryRun plans every change instead of making it.
	DryRun bool
	// MaxCalls bounds the session's calls (0: the harness's default).
	MaxCalls int
}

// Harness is one `durasync harness` session; the package's calls go to the
// one started last until it is closed.
type Harness struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Reader
	tmp      string
	previous *Harness
	// Roots maps each granted root to its directory.
	Roots map[string]string
}

// StartHarness starts a session and makes it the current one.
func StartHarness(o HarnessOptions) (*Harness, error) {
	tmp, err := os.MkdirTemp("", "durasync-harness-")
	if err != nil {
		return nil, err
	}
	h := &Harness{tmp: tmp, Roots: map[string]string{}}
	for _, name := range o.Roots {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		h.Roots[name] = dir
	}
	for name, dir := range o.RootDirs {
		h.Roots[name] = dir
	}
	args := []string{"harness"}
	if o.Manifest != "" {
		args = append(args, o.Manifest)
	}
	for name, dir := range h.Roots {
		args = append(args, "--root", name+"="+dir)
	}
	if o.DryRun {
		args = append(args, "--dry-run")
	}
	if o.MaxCalls > 0 {
		args = append(args, "--max-calls", fmt.Sprint(o.MaxCalls))
	}
	bin := os.Getenv("DURASYNC")
	if bin == "" {
		bin = "durasync"
	}
	h.cmd = exec.Command(bin, args...)
	h.cmd.Stderr = os.Stderr
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h.out = bufio.NewReaderSize(stdout, 64<<10)
	if err := h.cmd.Start(); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("starting %s harness: %w", bin, err)
	}
	var hello map[string]json.RawMessage
	if err := h.read(&hello); err != nil || hello["ready"] == nil {
		h.Close()
		return nil, fmt.Errorf("durasync harness did not start (%v)", err)
	}
	h.previous, current = current, h
	return h, nil
}

// Close ends the session and removes its temporary roots.
func (h *Harness) Close() {
	if current == h {
		current = h.previous
	}
	h.in.Close()
	h.cmd.Wait()
	os.RemoveAll(h.tmp)
}

func (h *Harness) read(v any) error {
	var line []byte
	for {
		chunk, err := h.out.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxAnswerBytes {
			return fmt.Errorf("an answer line is over %d bytes", MaxAnswerBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return fmt.Errorf("durasync harness ended without an answer: %w", err)
		}
		return json.Unmarshal(line, v)
	}
}

// call makes one call; an `err` answer is an *Error. A trap (what the
// sandbox would trap on) panics, as it ends the run in the component.
func (h *Harness) call(call string, args map[string]any, result any) error {
	req := map[string]any{"call": call}
	for k, v := range args {
		req[k] = v
	}
	line, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	if _, err := h.in.Write(append(line, '\n')); err != nil {
		panic(fmt.Sprintf("durasync harness: %v", err))
	}
	var answer struct {
		Ok   json.RawMessage `json:"ok"`
		Err  *Error          `json:"err"`
		Trap *string         `json:"trap"`
	}
	if err := h.read(&answer); err != nil {
		panic(fmt.Sprintf("durasync harness: %v", err))
	}
	switch {
	case answer.Err != nil:
		return answer.Err
	case answer.Trap != nil:
		panic("durasync harness trap: " + *answer.Trap)
	}
	if result != nil {
		if err := json.Unmarshal(answer.Ok, result); err != nil {
			panic(fmt.Sprintf("durasync harness: %s: %v", call, err))
		}
	}
	return nil
}

func harness() *Harness {
	if current == nil {
		panic("no durasync harness is running: call durasync.StartHarness first")
	}
	return current
}

// Operations is the record of the session's operations, as `durasync run
// --json` lists them.
func (h *Harness) Operations() []map[string]any {
	var ops []map[string]any
	h.call("harness:operations", nil, &ops)
	return ops
}

// Logs is each message the run's log budget let through, as "level: message".
func (h *Harness) Logs() []string {
	var logs []struct{ Level, Message string }
	h.call("harness:logs", nil, &logs)
	out := make([]string, len(logs))
	for i, l := range logs {
		out[i] = l.Level + ": " + l.Message
	}
	return out
}

// FileState is a file's permission bits and bytes.
type FileState struct {
	Mode     uint32
	Contents string
}

// Files is every regular file under a root by path, without the host's own
// `.durasync*` entries.
func (h *Harness) Files(root string) (map[string]FileState, error) {
	base := h.Roots[root]
	out := map[string]FileState{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".durasync") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(base, p)
			out[rel] = FileState{uint32(info.Mode().Perm()) | special(info.Mode()), string(b)}
		}
		return nil
	})
	return out, err
}

func special(m fs.FileMode) uint32 {
	var bits uint32
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

type wireReport struct {
	Outcome          string
	Written, Removed uint32
}

func (r wireReport) report() Report {
	for o := Unchanged; o <= Removed; o++ {
		if o.String() == r.Outcome {
			return Report{o, r.Written, r.Removed}
		}
	}
	panic("durasync harness: unknown outcome " + r.Outcome)
}

// Dir is a directory the plugin may use: a granted root ([OpenRoot]) or a
// directory beneath one ([Dir.OpenDir]). Paths are relative to it.
type Dir struct {
	handle uint64
}

func (d *Dir) call(call string, args map[string]any, result any) error {
	if args == nil {
		args = map[string]any{}
	}
	args["dir"] = d.handle
	return harness().call(call, args, result)
}

// OpenRoot is the handle of a root the manifest grants, by name.
func OpenRoot(name string) (*Dir, error) {
	var handle uint64
	if err := harness().call("open-root", map[string]any{"name": name}, &handle); err != nil {
		return nil, err
	}
	return &Dir{handle}, nil
}

// Close releases the handle.
func (d *Dir) Close() {
	d.call("drop", nil, nil)
}

// Sync makes the directory at path hold exactly files, atomically and durably.
func (d *Dir) Sync(path string, files []File) (Report, error) {
	wire := make([]map[string]any, len(files))
	for i, f := range files {
		wire[i] = map[string]any{"name": f.Name, "contents": base64.StdEncoding.EncodeToString(f.Contents), "mode": f.Mode}
	}
	var r wireReport
	if err := d.call("sync", map[string]any{"path": path, "files": wire}, &r); err != nil {
		return Report{}, err
	}
	return r.report(), nil
}

// WriteFile replaces one file atomically and durably.
func (d *Dir) WriteFile(path string, contents []byte, mode uint32) (Report, error) {
	var r wireReport
	args := map[string]any{"path": path, "contents": base64.StdEncoding.EncodeToString(contents), "mode": mode}
	if err := d.call("write-file", args, &r); err != nil {
		return Report{}, err
	}
	return r.report(), nil
}

// ReadFile is the bytes of a regular file; found is false when nothing
// exists at path.
func (d *Dir) ReadFile(path string) (contents []byte, found bool, err error) {
	var b64 *string
	if err := d.call("read-file", map[string]any{"path": path}, &b64); err != nil {
		return nil, false, err
	}
	if b64 == nil {
		return nil, false, nil
	}
	b, err := base64.StdEncoding.DecodeString(*b64)
	if err != nil {
		panic("durasync harness: read-file: " + err.Error())
	}
	return b, true, nil
}

// ListDir is the entries of the directory at path, sorted by name.
func (d *Dir) ListDir(path string) ([]Entry, error) {
	var wire []struct{ Name, Kind string }
	if err := d.call("list-dir", map[string]any{"path": path}, &wire); err != nil {
		return nil, err
	}
	kinds := map[string]EntryKind{"file": KindFile, "directory": KindDirectory, "symlink": KindSymlink, "other": KindOther}
	out := make([]Entry, len(wire))
	for i, e := range wire {
		out[i] = Entry{e.Name, kinds[e.Kind]}
	}
	return out, nil
}

// Remove durably removes a file or a whole tree; false when nothing was there.
func (d *Dir) Remove(path string) (bool, error) {
	var removed bool
	err := d.call("remove", map[string]any{"path": path}, &removed)
	return removed, err
}

// Exchange is the raw primitive: atomically exchange two entries.
func (d *Dir) Exchange(a, b string) error {
	return d.call("exchange", map[string]any{"a": a, "b": b}, nil)
}

// Fsync is the raw primitive: fsync the file or directory at path.
func (d *Dir) Fsync(path string) error {
	return d.call("fsync", map[string]any{"path": path}, nil)
}

// OpenDir is a handle for the directory at path beneath this one.
func (d *Dir) OpenDir(path string) (*Dir, error) {
	var handle uint64
	if err := d.call("open-dir", map[string]any{"path": path}, &handle); err != nil {
		return nil, err
	}
	return &Dir{handle}, nil
}

func logAt(level string, format string, args []any) {
	harness().call("log", map[string]any{"level": level, "message": fmt.Sprintf(format, args...)}, nil)
}
