package scienceworld

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/environments"
)

// ErrNoJar means no simulator jar was given or found.
var ErrNoJar = errors.New("scienceworld: simulator jar not found (set --scienceworld-jar or SCIENCEWORLD_JAR; see docs/environments.md)")

// JarEnv is the environment variable that names the simulator jar when
// Options.Jar is empty.
const JarEnv = "SCIENCEWORLD_JAR"

// findJar resolves the jar path from opts or the environment.
func findJar(opts environments.Options) (string, error) {
	jar := opts.Jar
	if jar == "" {
		jar = os.Getenv(JarEnv)
	}
	if jar == "" {
		return "", ErrNoJar
	}
	st, err := os.Stat(jar)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoJar, err)
	}
	if st.IsDir() {
		return "", fmt.Errorf("%w: %s is a directory", ErrNoJar, jar)
	}
	// The JVM runs in the jar's folder (as the Python wrapper runs it in the
	// package folder), so a relative -cp would be resolved from there.
	abs, err := filepath.Abs(jar)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoJar, err)
	}
	return abs, nil
}

// findJava resolves the java launcher: Extra["java"], $JAVA_HOME/bin/java,
// then java on PATH.
func findJava(opts environments.Options) (string, error) {
	if j := opts.Extra["java"]; j != "" {
		return j, nil
	}
	if home := os.Getenv("JAVA_HOME"); home != "" {
		j := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(j); err == nil {
			return j, nil
		}
	}
	j, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("scienceworld: no java launcher (install a JRE 8+ or set JAVA_HOME): %w", err)
	}
	return j, nil
}

// jvm is one simulator process: py4j's GatewayServer on an ephemeral port
// of 127.0.0.1, started with --die-on-broken-pipe so that it exits when its
// stdin closes (including when this process dies).
type jvm struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	port   int
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, valid after exited is closed

	mu       sync.Mutex
	stderr   []string // last lines of stderr, for error messages
	outBytes int64    // stdout bytes drained
	outTail  []byte   // last bytes of stdout
}

const (
	keepStderr = 20
	keepStdout = 1024
)

// startJVM launches the gateway with the JVM options jvmArgs and waits for
// it to print its port.
func startJVM(ctx context.Context, java, classpath, dir string, jvmArgs []string, startup time.Duration) (*jvm, error) {
	args := append(append([]string(nil), jvmArgs...), "-cp", classpath, "py4j.GatewayServer", "--die-on-broken-pipe", "0")
	cmd := exec.Command(java, args...)
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("scienceworld: starting %s: %w", java, err)
	}
	j := &jvm{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	portc := make(chan string, 1)
	// os/exec: Wait closes the pipes, so it must follow the last read. The
	// drains end at EOF, when the process has exited; only then is its exit
	// status taken, so that an error message sees all of its stderr.
	var drains sync.WaitGroup
	drains.Add(2)
	go func() { defer drains.Done(); j.drainStderr(stderr) }()
	go func() { defer drains.Done(); j.drainStdout(stdout, portc) }()
	go func() {
		drains.Wait()
		j.err = cmd.Wait()
		close(j.exited)
	}()

	timer := time.NewTimer(startup)
	defer timer.Stop()
	select {
	case line := <-portc:
		port, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || port <= 0 || port > 65535 {
			j.kill()
			return nil, fmt.Errorf("%w: expected the gateway port on the first line of stdout, got %q%s", environments.ErrSimulatorDied, line, j.stderrTail())
		}
		j.port = port
		return j, nil
	case <-j.exited:
		hint := ""
		if strings.Contains(j.stderrTail(), "py4j.GatewayServer") {
			hint = " (a simulator jar without py4j: add a py4j jar with the classpath option)"
		}
		return nil, fmt.Errorf("%w: the JVM exited while starting (%v)%s%s", environments.ErrSimulatorDied, j.err, j.stderrTail(), hint)
	case <-timer.C:
		j.kill()
		return nil, fmt.Errorf("%w: the JVM printed no port within %s%s", environments.ErrSimulatorDied, startup, j.stderrTail())
	case <-ctx.Done():
		j.kill()
		return nil, fmt.Errorf("%w: the JVM did not start: %w%s", environments.ErrSimulatorDied, ctx.Err(), j.stderrTail())
	}
}

// drainStdout hands the first line (the port) over and then discards the
// simulator's per-step debug output, so that the JVM never blocks on a
// full pipe. The last bytes are kept for error messages.
func (j *jvm) drainStdout(r io.Reader, portc chan<- string) {
	br := bufio.NewReaderSize(r, 64<<10)
	line, err := br.ReadString('\n')
	if line != "" || err == nil {
		portc <- line
	}
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			j.mu.Lock()
			j.outBytes += int64(n)
			j.outTail = append(j.outTail, buf[:n]...)
			if len(j.outTail) > keepStdout {
				j.outTail = append(j.outTail[:0], j.outTail[len(j.outTail)-keepStdout:]...)
			}
			j.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (j *jvm) drainStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		j.mu.Lock()
		j.stderr = append(j.stderr, sc.Text())
		if len(j.stderr) > keepStderr {
			j.stderr = j.stderr[len(j.stderr)-keepStderr:]
		}
		j.mu.Unlock()
		log.Debug().Str("jvm", "stderr").Msg(sc.Text())
	}
	_, _ = io.Copy(io.Discard, r) // after an over-long line: keep draining
}

func (j *jvm) stderrTail() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.stderr) == 0 {
		return ""
	}
	return "; stderr: " + strings.Join(j.stderr, " | ")
}

// deadErr says why the process died, or nil while it runs.
func (j *jvm) deadErr() error {
	select {
	case <-j.exited:
		j.mu.Lock()
		tail := strings.TrimSpace(string(j.outTail))
		j.mu.Unlock()
		if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:]
		}
		if tail != "" {
			tail = "; last stdout: " + tail
		}
		return fmt.Errorf("the JVM exited (%v)%s%s", j.err, j.stderrTail(), tail)
	default:
		return nil
	}
}

func (j *jvm) dial(timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(j.port)), timeout)
}

func (j *jvm) kill() {
	_ = j.stdin.Close()
	if j.cmd.Process != nil {
		_ = j.cmd.Process.Kill()
	}
	// exited waits for the end of its output: bounded, in case something
	// else (a child of the JVM) still holds the pipes open.
	select {
	case <-j.exited:
	case <-time.After(5 * time.Second):
	}
}

// stop closes stdin (the gateway then exits by itself) and kills the
// process if it is still there after grace.
func (j *jvm) stop(grace time.Duration) error {
	_ = j.stdin.Close()
	select {
	case <-j.exited:
		return nil
	case <-time.After(grace):
		j.kill()
		return nil
	}
}
