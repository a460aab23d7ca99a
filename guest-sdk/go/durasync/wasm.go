//go:build wasip1

// The component side of package durasync: the generated bindings, the
// collector's discipline (see the package documentation).

package durasync

import (
	"fmt"
	"runtime/debug"

	witRuntime "go.bytecodealliance.org/pkg/wit/runtime"

	fs "wit_component/durasync_plugin_fs"
	hostlog "wit_component/durasync_plugin_log"
	types "wit_component/durasync_plugin_types"
)

func init() {
	// Off before any export runs: the first cabi_realloc (the export's own
	// arguments) already happens with the collector's settings of now.
	debug.SetGCPercent(-1)
}

// afterHostCall runs after every host call, once its results are Go values:
// it releases the bindings' pins and collects when due.
func afterHostCall() {
	witRuntime.Unpin()
	Collect()
}

func hostError(e types.Error) *Error {
	switch e.Tag() {
	case types.Error_InvalidPath:
		return &Error{InvalidPath, e.InvalidPath()}
	case types.Error_NotGranted:
		return &Error{NotGranted, e.NotGranted()}
	case types.Error_ReadOnly:
		return &Error{ReadOnly, e.ReadOnly()}
	case types.Error_NotFound:
		return &Error{NotFound, e.NotFound()}
	case types.Error_NotADirectory:
		return &Error{NotADirectory, e.NotADirectory()}
	case types.Error_Limit:
		return &Error{Limit, e.Limit()}
	case types.Error_Unsupported:
		return &Error{Unsupported, e.Unsupported()}
	case types.Error_Committed:
		return &Error{Committed, e.Committed()}
	case types.Error_Io:
		return &Error{Io, e.Io()}
	}
	return &Error{"unknown", fmt.Sprintf("host error case %d", e.Tag())}
}

func report(r types.Report) Report {
	var o Outcome
	switch r.Outcome {
	case types.Outcome_Unchanged:
		o = Unchanged
	case types.Outcome_Created:
		o = Created
	case types.Outcome_Replaced:
		o = Replaced
	case types.Outcome_Removed:
		o = Removed
	}
	return Report{o, r.Written, r.Removed}
}

// Dir is a directory the plugin may use: a granted root ([OpenRoot]) or a
// directory beneath one ([Dir.OpenDir]). Paths are relative to it.
type Dir struct {
	handle *fs.Dir
}

// OpenRoot is the handle of a root the manifest grants, by name.
func OpenRoot(name string) (*Dir, error) {
	r := fs.OpenRoot(name)
	defer afterHostCall()
	if r.IsErr() {
		return nil, hostError(r.Err())
	}
	return &Dir{r.Ok()}, nil
}

// Close releases the handle (the host drops it when the run ends anyway).
func (d *Dir) Close() {
	d.handle.Drop()
}

// Sync makes the directory at path hold exactly files, atomically and
// durably (see the WIT's `sync`).
func (d *Dir) Sync(path string, files []File) (Report, error) {
	wit := make([]types.File, len(files))
	for i, f := range files {
		wit[i] = types.File{Name: f.Name, Contents: f.Contents, Mode: f.Mode}
	}
	r := d.handle.Sync(path, wit)
	defer afterHostCall()
	if r.IsErr() {
		return Report{}, hostError(r.Err())
	}
	return report(r.Ok()), nil
}

// WriteFile replaces one file atomically and durably.
func (d *Dir) WriteFile(path string, contents []byte, mode uint32) (Report, error) {
	r := d.handle.WriteFile(path, contents, mode)
	defer afterHostCall()
	if r.IsErr() {
		return Report{}, hostError(r.Err())
	}
	return report(r.Ok()), nil
}

// ReadFile is the bytes of a regular file; found is false when nothing
// exists at path.
func (d *Dir) ReadFile(path string) (contents []byte, found bool, err error) {
	r := d.handle.ReadFile(path)
	defer afterHostCall()
	if r.IsErr() {
		return nil, false, hostError(r.Err())
	}
	o := r.Ok()
	if o.IsNone() {
		return nil, false, nil
	}
	return o.Some(), true, nil
}

// ListDir is the entries of the directory at path, sorted by name.
func (d *Dir) ListDir(path string) ([]Entry, error) {
	r := d.handle.ListDir(path)
	defer afterHostCall()
	if r.IsErr() {
		return nil, hostError(r.Err())
	}
	wit := r.Ok()
	out := make([]Entry, len(wit))
	for i, e := range wit {
		out[i] = Entry{e.Name, EntryKind(e.Kind)}
	}
	return out, nil
}

// Remove durably removes a file or a whole tree; false when nothing was there.
func (d *Dir) Remove(path string) (bool, error) {
	r := d.handle.Remove(path)
	defer afterHostCall()
	if r.IsErr() {
		return false, hostError(r.Err())
	}
	return r.Ok(), nil
}

// Exchange is the raw primitive: atomically exchange two entries.
func (d *Dir) Exchange(a, b string) error {
	r := d.handle.Exchange(a, b)
	defer afterHostCall()
	if r.IsErr() {
		return hostError(r.Err())
	}
	return nil
}

// Fsync is the raw primitive: fsync the file or directory at path.
func (d *Dir) Fsync(path string) error {
	r := d.handle.Fsync(path)
	defer afterHostCall()
	if r.IsErr() {
		return hostError(r.Err())
	}
	return nil
}

// OpenDir is a handle for the directory at path beneath this one.
func (d *Dir) OpenDir(path string) (*Dir, error) {
	r := d.handle.OpenDir(path)
	defer afterHostCall()
	if r.IsErr() {
		return nil, hostError(r.Err())
	}
	return &Dir{r.Ok()}, nil
}

func logAt(level string, format string, args []any) {
	levels := map[string]hostlog.Level{
		"debug": hostlog.Level_Debug,
		"info":  hostlog.Level_Info,
		"warn":  hostlog.Level_Warn,
		"error": hostlog.Level_Error,
	}
	hostlog.Log(levels[level], fmt.Sprintf(format, args...))
	afterHostCall()
}
