//go:build unix

// Package siw runs the Linux kernel's soft-iWARP driver (siw) in a QEMU VM
// for interop tests: Start boots the VM of siwvm.sh (beside this file) with
// TCP forwards from the host's loopback and a guest shell script, WaitFor
// waits for a line the script prints, Wait collects its exit status, and
// Close kills QEMU. Nothing here skips: if the VM cannot run, the error says
// why.
//
// The guest is 10.0.2.15 and reaches the host's 127.0.0.1 as 10.0.2.2, so a
// guest client dials 10.0.2.2:PORT for a listener on host 127.0.0.1:PORT; a
// guest server on GUESTPORT is reached on 127.0.0.1:HOSTPORT through a
// Forward. rdma_cm binds to siw0 (eth0): guest commands use 10.0.2.15.
package siw

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Forward is a TCP forward from host 127.0.0.1:Host to guest port Guest.
type Forward struct{ Host, Guest int }

// Config describes one VM run.
type Config struct {
	// Script is the guest's shell script (busybox sh, run from /host). Its
	// output lines are the VM's Lines; its exit status the VM's.
	Script   string
	Forwards []Forward
	// Timeout is the VM's hard time limit, boot included (default 3 min):
	// then QEMU is killed whatever the guest does.
	Timeout time.Duration
	// RunDir keeps console.log (kernel messages), output.log (the script's
	// output), qemu.log and share/ (the guest's /host). Default: a new
	// directory under the work directory's runs/.
	RunDir string
	// Log, if set, gets every output line as it arrives (t.Logf, say);
	// it is called until Close returns.
	Log func(format string, args ...any)
}

// Result is how a VM run ended.
type Result struct {
	// ExitCode is the guest script's exit status when Reported; otherwise
	// siwvm.sh's: 124 for the time limit, 125 when the guest never said
	// (QEMU failed, the kernel panicked), -1 when killed.
	ExitCode int
	Reported bool
}

// VM is a running (or finished) VM.
type VM struct {
	RunDir string
	cmd    *exec.Cmd

	mu     sync.Mutex
	lines  []string
	change chan struct{} // closed and replaced whenever lines grow or the VM ends

	done   chan struct{}
	result Result
	err    error // from exec, if the script could not be run at all
}

// Script is the path of siwvm.sh: $IWARP_SIWVM_SCRIPT, or the file beside
// this source file.
func Script() string {
	if s := os.Getenv("IWARP_SIWVM_SCRIPT"); s != "" {
		return s
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "siwvm.sh")
}

var setupOnce struct {
	sync.Once
	err error
}

// Setup runs "siwvm.sh setup" once per process: packages, siw.ko and the
// initramfs, each only if missing. It needs root; the first time it also
// needs Debian's mirror and takes a minute or so.
func Setup(ctx context.Context) error {
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, Script(), "setup").CombinedOutput()
		if err != nil {
			setupOnce.err = fmt.Errorf("siw: %s setup: %v\n%s", Script(), err, tail(string(out), 40))
		}
	})
	return setupOnce.err
}

// Start runs Setup and boots a VM running cfg.Script. The caller must Close
// it (Close after the VM has ended is harmless).
func Start(ctx context.Context, cfg Config) (*VM, error) {
	if err := Setup(ctx); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Minute
	}
	if cfg.RunDir == "" {
		work := os.Getenv("IWARP_SIWVM_WORK")
		if work == "" {
			work = "/var/tmp/goiwarp-siwvm"
		}
		if err := os.MkdirAll(filepath.Join(work, "runs"), 0o755); err != nil {
			return nil, err
		}
		d, err := os.MkdirTemp(filepath.Join(work, "runs"), time.Now().Format("20060102-150405-"))
		if err != nil {
			return nil, err
		}
		cfg.RunDir = d
	}
	args := []string{"run", "-r", cfg.RunDir, "-t", fmt.Sprint(int(cfg.Timeout.Seconds()))}
	for _, f := range cfg.Forwards {
		args = append(args, "-p", fmt.Sprintf("%d:%d", f.Host, f.Guest))
	}
	args = append(args, "--", cfg.Script)
	vm := &VM{RunDir: cfg.RunDir, change: make(chan struct{}), done: make(chan struct{})}
	vm.cmd = exec.Command(Script(), args...)
	// Its own process group, with QEMU in it (siwvm.sh runs QEMU under
	// timeout --foreground), so that Close can kill all of it.
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.RunDir, "siwvm.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	vm.cmd.Stdout, vm.cmd.Stderr = pw, logf
	err = vm.cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("siw: starting %s: %w", Script(), err)
	}
	read := make(chan struct{})
	go vm.read(pr, cfg.Log, read)
	go vm.wait(pr, read)
	return vm, nil
}

// read collects the guest's output lines.
func (vm *VM) read(r io.Reader, log func(string, ...any), done chan<- struct{}) {
	defer close(done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		if log != nil {
			log("guest: %s", l)
		}
		vm.mu.Lock()
		vm.lines = append(vm.lines, l)
		close(vm.change)
		vm.change = make(chan struct{})
		vm.mu.Unlock()
	}
}

// wait records how siwvm.sh ended, once its output is read (or after a
// grace period, should something it started still hold the pipe).
func (vm *VM) wait(pr *os.File, read <-chan struct{}) {
	err := vm.cmd.Wait()
	select {
	case <-read:
	case <-time.After(3 * time.Second):
	}
	pr.Close()
	<-read
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		vm.result.ExitCode = ee.ExitCode()
	default:
		vm.result.ExitCode = -1
		vm.err = err
	}
	out, _ := os.ReadFile(filepath.Join(vm.RunDir, "output.log"))
	vm.result.Reported = bytes.Contains(out, []byte("SIWVM_EXIT="))
	close(vm.done)
	close(vm.change)
	vm.change = make(chan struct{})
}

// Lines returns the guest script's output lines so far.
func (vm *VM) Lines() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]string(nil), vm.lines...)
}

// Output returns the guest script's output so far.
func (vm *VM) Output() string { return strings.Join(vm.Lines(), "\n") }

// WaitFor waits until the guest prints a line containing marker, and
// returns that line (the first such line, printed before the call or
// after). It fails if ctx ends or the VM ends first, saying how it ended.
func (vm *VM) WaitFor(ctx context.Context, marker string) (string, error) {
	for {
		vm.mu.Lock()
		for _, l := range vm.lines {
			if strings.Contains(l, marker) {
				vm.mu.Unlock()
				return l, nil
			}
		}
		ch := vm.change
		vm.mu.Unlock()
		select {
		case <-vm.done:
			// Lines are complete once done is closed; look once more.
			if l, ok := vm.find(marker); ok {
				return l, nil
			}
			return "", fmt.Errorf("siw: the VM ended before printing %q: %s", marker, vm.Diagnose())
		case <-ctx.Done():
			return "", fmt.Errorf("siw: waiting for %q: %w; output so far:\n%s", marker, ctx.Err(), tail(vm.Output(), 20))
		case <-ch:
		}
	}
}

func (vm *VM) find(marker string) (string, bool) {
	for _, l := range vm.Lines() {
		if strings.Contains(l, marker) {
			return l, true
		}
	}
	return "", false
}

// Wait waits until the VM has powered off (or been killed) and returns how
// it ended.
func (vm *VM) Wait(ctx context.Context) (Result, error) {
	select {
	case <-vm.done:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("siw: waiting for the VM to end: %w; output so far:\n%s", ctx.Err(), tail(vm.Output(), 20))
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.result, vm.err
}

// Signal creates the file name in the guest's /host, which the guest's
// "waitfile name" waits for: a go-ahead from the host.
func (vm *VM) Signal(name string) error {
	return os.WriteFile(filepath.Join(vm.RunDir, "share", name), nil, 0o644)
}

// Context returns a copy of parent that is also cancelled when the VM ends,
// so that waiting for a peer in the VM stops when the VM is gone.
func (vm *VM) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-vm.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Done is closed when the VM has ended.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// Close kills the VM if it still runs, and waits until it and every
// process siwvm.sh started are gone (for 30 s at most: a killed QEMU
// gives back its guest's memory as it exits, which a loaded machine does
// slowly).
func (vm *VM) Close() {
	pgid := vm.cmd.Process.Pid
	select {
	case <-vm.done:
	default:
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-vm.done
	}
	for i := 0; i < 300 && len(vm.Leftovers()) > 0; i++ {
		syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(100 * time.Millisecond)
	}
}

// Leftovers returns the processes of the VM's process group still alive
// (QEMU among them, while it runs); none once Close has returned.
func (vm *VM) Leftovers() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == fmt.Sprint(vm.cmd.Process.Pid) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// Console returns the guest kernel's log (the first serial port).
func (vm *VM) Console() string {
	b, _ := os.ReadFile(filepath.Join(vm.RunDir, "console.log"))
	return string(b)
}

// Diagnose says how the VM ended, with the ends of siwvm.sh's messages,
// the guest's output and the kernel's log: for failure messages.
func (vm *VM) Diagnose() string {
	var b strings.Builder
	select {
	case <-vm.done:
		vm.mu.Lock()
		r, err := vm.result, vm.err
		vm.mu.Unlock()
		switch {
		case err != nil:
			fmt.Fprintf(&b, "siwvm.sh did not run: %v", err)
		case r.Reported:
			fmt.Fprintf(&b, "guest script exited with status %d", r.ExitCode)
		case r.ExitCode == 124:
			b.WriteString("time limit hit")
		default:
			fmt.Fprintf(&b, "the guest never reported (siwvm.sh status %d: QEMU failed or the kernel died)", r.ExitCode)
		}
	default:
		b.WriteString("still running")
	}
	msgs, _ := os.ReadFile(filepath.Join(vm.RunDir, "siwvm.log"))
	fmt.Fprintf(&b, "\n--- siwvm.sh:\n%s", tail(string(msgs), 30))
	fmt.Fprintf(&b, "\n--- guest output (last lines):\n%s", tail(vm.Output(), 20))
	fmt.Fprintf(&b, "\n--- guest kernel log (last lines, all in %s/console.log):\n%s", vm.RunDir, tail(vm.Console(), 25))
	return b.String()
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		// The kernel may hand the same free port out again: a VM with two
		// forwards on one port fails to start.
		if !ports.given[p] {
			ports.given[p] = true
			return p, nil
		}
	}
	return 0, errors.New("siw: no free port not given before")
}

// ports are the ports FreePort has given in this process.
var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
