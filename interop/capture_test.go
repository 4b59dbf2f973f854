//go:build interop

package interop

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// capture runs tcpdump on the loopback interface for one TCP port until
// the returned stop function is called; the pcap lands in dir. stop
// returns how many packets tcpdump says it dropped: a capture that lost
// some cannot be judged (Wireshark loses its place in the stream).
func capture(t *testing.T, port int) (pcap string, stop func() (dropped int)) {
	t.Helper()
	bin, err := exec.LookPath("tcpdump")
	require.NoError(t, err, "tcpdump is needed: apt-get install tcpdump")
	dir := os.Getenv("IWARP_PCAP_DIR") // keep the captures there, to look at
	if dir == "" {
		dir = t.TempDir()
	}
	pcap = filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(t.Name())+".pcap")
	cmd := exec.Command(bin, "-Z", "root", "--immediate-mode", "-B", "131072", "-i", "lo", "-s", "0", "-w", pcap, fmt.Sprintf("tcp port %d", port))
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	// tcpdump dies with the test binary, and with the test if it fails
	// before stopping the capture itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), "starting tcpdump (needs root)")
	var once sync.Once
	ready := make(chan error, 1)
	stats := make(chan int, 1) // packets dropped, from the statistics at exit
	go func() {
		defer close(stats)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				ready <- nil
				dropped := 0
				for sc.Scan() {
					// "N packets dropped by kernel", "N packets dropped by interface"
					var n int
					if _, err := fmt.Sscanf(sc.Text(), "%d packets dropped by", &n); err == nil {
						dropped += n
					}
				}
				stats <- dropped
				return
			}
		}
		ready <- fmt.Errorf("tcpdump exited before capturing")
	}()
	select {
	case err := <-ready:
		require.NoError(t, err)
		// "listening on" comes before the capture is really under way.
		time.Sleep(500 * time.Millisecond)
	case <-time.After(time.Minute): // a process start on a loaded machine
		cmd.Process.Kill()
		t.Fatal("tcpdump did not start")
	}
	dropped := 0
	stop = func() int {
		once.Do(func() {
			time.Sleep(200 * time.Millisecond) // let the last segments reach the ring
			cmd.Process.Signal(syscall.SIGINT)
			dropped = <-stats // before Wait, which closes the pipe
			cmd.Wait()
		})
		return dropped
	}
	t.Cleanup(func() { stop() })
	return pcap, stop
}

// keepCapture copies the capture of a failed test out of its temporary
// directory (unless IWARP_PCAP_DIR keeps every capture anyway), so that
// what went over the wire can be looked at after CI.
func keepCapture(t *testing.T, pcap string) {
	if os.Getenv("IWARP_PCAP_DIR") != "" {
		t.Logf("capture: %s", pcap)
		return
	}
	dir := filepath.Join(os.TempDir(), "goiwarp-failed-captures")
	dst := filepath.Join(dir, time.Now().Format("20060102-150405-")+filepath.Base(pcap))
	b, err := os.ReadFile(pcap)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		t.Logf("capture %s not kept: %v", pcap, err)
		return
	}
	t.Logf("capture kept: %s", dst)
}

// verdict is what Wireshark's dissectors make of a capture (the same
// questions shared/tools/tshark-check asks).
type verdict struct {
	Startups, FPDUs, GoodCRC, BadCRC, Terminates, Malformed int
	Expert                                                  string
}

// tcp.reassemble_out_of_order: on loopback a sender that moves between
// CPUs can have a segment overtake the one before it (each CPU has its own
// receive backlog); TCP then retransmits, and the capture shows both.
var tsharkOpts = []string{"-n", "--enable-heuristic", "iwarp_mpa_tcp", "-o", "tcp.try_heuristic_first:TRUE",
	"-o", "tcp.reassemble_out_of_order:TRUE",
	"--disable-heuristic", "rpcrdma_iwarp", "--disable-heuristic", "smb_direct_iwarp"}

func tshark(t *testing.T, pcap string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	require.NoError(t, err, "tshark is needed: apt-get install tshark")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := append(append([]string{"-r", pcap}, tsharkOpts...), args...)
	out, err := exec.CommandContext(ctx, bin, all...).Output()
	require.NoError(t, err, "tshark %v", args)
	return string(out)
}

func lines(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

func judge(t *testing.T, pcap string) verdict {
	t.Helper()
	var v verdict
	v.Startups = lines(tshark(t, pcap, "-Y", "iwarp_mpa.req || iwarp_mpa.rep"))
	for _, l := range strings.Split(tshark(t, pcap, "-Y", "iwarp_mpa.fpdu", "-T", "fields", "-e", "iwarp_mpa.ulpdulength"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			v.FPDUs += len(strings.Split(l, ","))
		}
	}
	pdml := tshark(t, pcap, "-Y", "iwarp_mpa.fpdu", "-T", "pdml")
	v.GoodCRC = strings.Count(pdml, "Good CRC32")
	v.BadCRC = strings.Count(pdml, "Bad CRC32")
	v.Terminates = lines(tshark(t, pcap, "-Y", "iwarp_rdma.opcode == 7"))
	v.Malformed = lines(tshark(t, pcap, "-Y", "_ws.malformed || _ws.expert.severity == error"))
	v.Expert = tshark(t, pcap, "-q", "-z", "expert")
	return v
}
