//go:build netns

package wan

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// NS is a named network namespace that this process created with
// `ip netns add` and removes with Close.
//
// # Running code inside it
//
// Do runs a function on a fresh goroutine locked to its OS thread, after
// moving that thread into the namespace with setns(2). A socket belongs to
// the namespace of the thread that called socket(2), for its whole life, so
// a listener or a dialled connection made inside Do stays in the namespace;
// the goroutines that later read and write it (a QP's loops, the netpoller)
// may run on any thread. The locked goroutine never unlocks: when it returns
// the Go runtime ends the thread instead of reusing it, so no other
// goroutine ever runs in a foreign namespace (the pattern of CNI's ns.Do and
// vishvananda/netns). Since Go 1.10 new runtime threads are cloned from a
// clean template thread, never from a locked one.
//
// This is more reliable than a child process per endpoint: both QPs live in
// one process, so a test can compare memory, count goroutines and check
// completions directly. Only the process-kill test needs a second process;
// it starts the test binary again and the child enters the namespace with
// Do the same way (see TestPeerProcess).
type NS struct {
	Name  string
	fd    int  // the namespace file under /var/run/netns, for setns
	owned bool // made by this process: Close deletes it
}

// nsPrefix starts the name of every namespace these tests make; the
// creator's PID follows, so SweepStale can tell which are orphans.
const nsPrefix = "iwwan"

var nsSeq atomic.Int32

// NewNS creates a namespace with a unique name (tag is a short label, for
// people reading `ip netns list`) and brings its loopback up.
func NewNS(tag string) (*NS, error) {
	name := fmt.Sprintf("%s-%d-%d%s", nsPrefix, os.Getpid(), nsSeq.Add(1), tag)
	if _, err := Cmd("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	fd, err := unix.Open("/var/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		Cmd("ip", "netns", "del", name)
		return nil, fmt.Errorf("wan: open namespace %s: %w", name, err)
	}
	ns := &NS{Name: name, fd: fd, owned: true}
	if _, err := ns.IP("link", "set", "lo", "up"); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// OpenNS opens a namespace made by another process (the test's parent).
func OpenNS(name string) (*NS, error) {
	fd, err := unix.Open("/var/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wan: open namespace %s: %w", name, err)
	}
	return &NS{Name: name, fd: fd}, nil
}

// Close deletes a namespace NewNS made; for one OpenNS opened it only
// closes the descriptor. Devices in a deleted namespace (veth ends, TUN
// devices) go with it; sockets still open in it keep it alive in the
// kernel until they close, but its name is gone at once.
func (ns *NS) Close() error {
	unix.Close(ns.fd)
	if !ns.owned {
		return nil
	}
	_, err := Cmd("ip", "netns", "del", ns.Name)
	return err
}

// Do runs fn on an OS thread inside the namespace and returns its error.
// Sockets fn creates belong to the namespace.
func (ns *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the thread ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("wan: setns %s: %w", ns.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// IP runs `ip -n NS args...`.
func (ns *NS) IP(args ...string) (string, error) {
	return Cmd("ip", append([]string{"-n", ns.Name}, args...)...)
}

// Exec runs a command inside the namespace (`ip netns exec`).
func (ns *NS) Exec(name string, args ...string) (string, error) {
	return Cmd("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Sysctl sets a sysctl inside the namespace (those under net.ipv4 and most
// of net.core are per namespace).
func (ns *NS) Sysctl(key, value string) error {
	_, err := ns.Exec("sysctl", "-q", "-w", key+"="+value)
	return err
}

// ReadSysctl reads a sysctl as seen inside the namespace.
func (ns *NS) ReadSysctl(key string) (string, error) {
	out, err := ns.Exec("sysctl", "-n", key)
	return strings.TrimSpace(out), err
}

// Cmd runs a command and returns its standard output; the error carries
// standard error.
func Cmd(name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	c := exec.Command(name, args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return stdout.String(), fmt.Errorf("wan: %s %s: %w: %s", name, strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// SweepStale deletes namespaces that an earlier run of these tests left
// behind when it was killed before its clean-up ran: names with this
// package's prefix whose creating process is gone. It touches nothing else.
func SweepStale() {
	out, err := Cmd("ip", "netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix+"-") {
			continue
		}
		parts := strings.SplitN(strings.TrimPrefix(f[0], nsPrefix+"-"), "-", 2)
		pid, err := strconv.Atoi(parts[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			Cmd("ip", "netns", "del", f[0])
		}
	}
}

// HostSysctl reads a sysctl of the initial namespace (this process's).
func HostSysctl(key string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
	return strings.TrimSpace(string(b)), err
}

// SetHostSysctl writes a sysctl of the initial namespace.
func SetHostSysctl(key, value string) error {
	return os.WriteFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), []byte(value), 0o644)
}
