// A hostile Go plugin: each `--input` names one attempt to reach something
// the manifest does not grant. An attempt that fails is returned as the
// run's error, `ATTEMPT: message`, so the operator sees exactly how it
// failed; one that traps (memory, time, CPU, a panic) is reported by the
// host.
//
// Attempts that cannot fail by design (reading the environment, the
// arguments, the clock, randomness) return what the plugin saw, as JSON.
package export_wit_world

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
	. "wit_component/durasync_plugin_plugin_types"
)

func Describe() Info {
	summary := "tries to reach files, sockets, memory and time it was not granted"
	return Info{Name: "hostile-go", Version: "0", Summary: summary, Roots: []string{"data"}}
}

func Run(config string, input []uint8) witTypes.Result[string, string] {
	name, arg, _ := strings.Cut(strings.TrimSpace(string(input)), " ")
	return durasync.Run(func() (string, error) {
		out, err := attempt(name, arg)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return out, nil
	})
}

// sink keeps allocations alive so the compiler cannot drop them.
var sink [][]byte

func attempt(name, arg string) (string, error) {
	switch name {
	case "open":
		b, err := os.ReadFile("/etc/passwd")
		return string(b), err
	case "write":
		err := os.WriteFile("/tmp/durasync-go-escape", []byte("escaped"), 0o644)
		return "wrote /tmp/durasync-go-escape", err
	case "listdir":
		entries, err := os.ReadDir("/")
		return fmt.Sprint(entries), err
	case "socket":
		c, err := net.Dial("tcp", arg)
		if err != nil {
			return "", err
		}
		_, err = c.Write([]byte("escaped"))
		return "connected", err
	case "resolve":
		addrs, err := net.LookupHost(arg)
		return fmt.Sprint(addrs), err
	case "environ":
		wd, _ := os.Getwd()
		b, err := json.Marshal(map[string]any{"environ": os.Environ(), "argv": os.Args, "cwd": wd})
		return string(b), err
	case "alloc":
		// 64 MiB at a time up to 4 GiB: far past any memory limit.
		for i := 0; i < 64; i++ {
			b := make([]byte, 64<<20)
			b[len(b)-1] = 1
			sink = append(sink, b)
		}
		return fmt.Sprintf("allocated %d blocks of 64 MiB", len(sink)), nil
	case "sleep":
		time.Sleep(time.Hour)
		return "slept an hour", nil
	case "loop":
		n := 0
		for {
			n++
			if n < 0 {
				return "looped", nil
			}
		}
	case "clock-and-random":
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		now := float64(time.Now().UnixNano()) / 1e9
		out, err := json.Marshal(map[string]any{"time": now, "random": hex.EncodeToString(b)})
		return string(out), err
	case "escape-root":
		// Through the host API: the path rules refuse it.
		root, err := durasync.OpenRoot("data")
		if err != nil {
			return "", err
		}
		_, err = root.WriteFile("../escaped", []byte("x"), 0o644)
		return "wrote ../escaped", err
	case "exit":
		os.Exit(0)
	case "uncaught":
		// Not turned into the run's error: the Go runtime traps, and the
		// host must show the panic's message, not only "trapped".
		panic("uncaught-marker")
	}
	return "", fmt.Errorf("unknown attempt %q", name)
}
