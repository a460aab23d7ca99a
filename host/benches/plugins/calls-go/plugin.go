// Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
// (input: N): the per-call cost of a host call from Go through the helper
// package (`host/benches/host_calls.py`, beside its Rust, Python and
// JavaScript twins). The message gives the loop's time by the guest's
// monotonic clock (`time.Now`, `time.Since`), all N calls and the first 100.
package export_wit_world

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
	. "wit_component/durasync_plugin_plugin_types"
)

func Describe() Info {
	return Info{Name: "bench-calls-go", Version: "0", Summary: "N read-file calls", Roots: []string{"data"}}
}

func Run(config string, input []uint8) witTypes.Result[string, string] {
	return durasync.Run(func() (string, error) {
		calls, err := strconv.Atoi(strings.TrimSpace(string(input)))
		if err != nil {
			return "", err
		}
		root, err := durasync.OpenRoot("data")
		if err != nil {
			return "", err
		}
		total := 0
		start := 0
		began := time.Now()
		var marks []time.Duration
		for _, end := range []int{min(100, calls), calls} {
			for i := start; i < end; i++ {
				blob, found, err := root.ReadFile("blob")
				if err != nil || !found || len(blob) != 4096 {
					return "", fmt.Errorf("call %d: found=%v, %d bytes, %v", i, found, len(blob), err)
				}
				total += len(blob)
			}
			marks = append(marks, time.Since(began))
			start = end
		}
		return fmt.Sprintf("%d calls, %d bytes; in the guest: %d ns, the first 100: %d ns",
			calls, total, marks[1].Nanoseconds(), marks[0].Nanoseconds()), nil
	})
}
