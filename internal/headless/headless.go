// Package headless drives a headless Chromium for tests that must see a
// page as a browser does (the live report, `empo2 report --serve`): it
// starts Debian's `chromium` with the DevTools protocol on a pipe
// (--remote-debugging-pipe: NUL-separated JSON messages on file
// descriptors 3 and 4, so no WebSocket client is needed), opens pages,
// evaluates JavaScript in them and takes screenshots. Standard library
// only.
//
// `make chromium` installs the browser where it is missing (.ci/run does).
package headless

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Names are the executables Find looks for, in order.
var Names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Find returns the path of a Chromium on PATH (or $CHROMIUM).
func Find() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, n := range Names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("headless: no Chromium on PATH (looked for %v; `make chromium` installs Debian's chromium)", Names)
}

// Browser is a running headless Chromium.
type Browser struct {
	cmd    *exec.Cmd
	in     *os.File // our end of its fd 3
	out    *os.File // our end of its fd 4
	mu     sync.Mutex
	nextID int
	wait   map[int]chan reply
	dead   chan struct{}
	err    error
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Start starts Chromium (path from Find) with a fresh profile in
// profileDir, a width × height window, and stderr to logTo (nil: dropped).
func Start(path, profileDir string, width, height int, logTo *os.File) (*Browser, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := []string{"--headless", "--remote-debugging-pipe", "--disable-gpu", "--no-first-run",
		"--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--hide-scrollbars", "--mute-audio", "--disable-dev-shm-usage", "--user-data-dir=" + profileDir,
		fmt.Sprintf("--window-size=%d,%d", width, height)}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses root with its sandbox
	}
	cmd := exec.Command(path, append(args, "about:blank")...)
	cmd.ExtraFiles = []*os.File{inR, outW} // fd 3: it reads; fd 4: it writes
	cmd.Stdout, cmd.Stderr = logTo, logTo
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	inR.Close()
	outW.Close()
	b := &Browser{cmd: cmd, in: inW, out: outR, wait: map[int]chan reply{}, dead: make(chan struct{})}
	go b.read()
	return b, nil
}

func (b *Browser) read() {
	r := bufio.NewReaderSize(b.out, 1<<20)
	for {
		msg, err := r.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.err = fmt.Errorf("headless: browser closed its pipe: %w", err)
			b.mu.Unlock()
			close(b.dead)
			return
		}
		var m struct {
			ID int `json:"id"`
			reply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.wait[m.ID]
		delete(b.wait, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.reply
		}
	}
}

// call sends one DevTools command (to a page's session when session is
// set) and decodes its result into res (nil: ignored).
func (b *Browser) call(session, method string, params any, res any) error {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return b.err
	}
	b.nextID++
	id := b.nextID
	ch := make(chan reply, 1)
	b.wait[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	enc, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.in.Write(append(enc, 0)); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("headless: %s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if res != nil {
			return json.Unmarshal(r.Result, res)
		}
		return nil
	case <-b.dead:
		return b.err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("headless: %s: no answer in 60 s", method)
	}
}

// Page is an open tab.
type Page struct {
	b       *Browser
	session string
}

// Open opens url in a new tab.
func (b *Browser) Open(url string) (*Page, error) {
	var t struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call("", "Target.createTarget", map[string]any{"url": url}, &t); err != nil {
		return nil, err
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call("", "Target.attachToTarget", map[string]any{"targetId": t.TargetID, "flatten": true}, &s); err != nil {
		return nil, err
	}
	return &Page{b: b, session: s.SessionID}, nil
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its JSON value into res.
func (p *Page) Eval(expr string, res any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.call(p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return fmt.Errorf("headless: %s: %s %s", expr, r.Exception.Text, r.Exception.Exception.Description)
	}
	if res == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, res)
}

// Screenshot returns a PNG of the page's viewport.
func (p *Page) Screenshot() ([]byte, error) {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.b.call(p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

// Close ends the browser (Browser.close, then a kill after 5 s).
func (b *Browser) Close() error {
	_ = b.call("", "Browser.close", map[string]any{}, nil)
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		err = errors.Join(errors.New("headless: browser killed after 5 s"), <-done)
	}
	b.in.Close()
	b.out.Close()
	return err
}
