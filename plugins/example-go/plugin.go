// Turns `KEY=value` lines into an envdir (one file per key, like
// daemontools' `envdir` reads), replaced atomically and durably.
//
// The Go twin of plugins/example: same input, same files, same messages.
package export_wit_world

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
	. "wit_component/durasync_plugin_plugin_types"
)

func Describe() Info {
	summary := "Turns KEY=value lines into an envdir, atomically and durably"
	return Info{Name: "example-go", Version: "0.1.0", Summary: summary, Roots: []string{"out"}}
}

func Run(config string, input []uint8) witTypes.Result[string, string] {
	return durasync.Run(func() (string, error) { return run(input) })
}

func run(input []byte) (string, error) {
	if !utf8.Valid(input) {
		return "", errors.New("the input is not UTF-8")
	}
	var files []durasync.File
	for _, line := range strings.Split(string(input), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, found := strings.Cut(line, "=")
		if !found {
			return "", fmt.Errorf("not KEY=value: %s", durasync.Quote(line))
		}
		files = append(files, durasync.NewFile(strings.TrimSpace(key), []byte(strings.TrimSpace(value)+"\n")))
	}
	root, err := durasync.OpenRoot("out")
	if err != nil {
		return "", err
	}
	// One atomic swap: readers see the old envdir or the new one, never a mix.
	report, err := root.Sync("env", files)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("env: %s (%d written, %d removed)", report.Outcome, report.Written, report.Removed), nil
}
