package browser

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-rod/rod/lib/cdp"
)

// maxMessage bounds one DevTools message from the browser. Screenshots are
// the largest ones; a full HD PNG in base64 stays well below this.
const maxMessage = 64 << 20

// pipeConn speaks the DevTools protocol over --remote-debugging-pipe:
// JSON messages ended by a NUL byte, commands on the browser's fd 3 and
// answers and events on its fd 4. There is no port to reach: the only
// way to the browser is the pair of pipes the daemon holds.
//
// The browser's output arrives through Write (the sandbox's output pump
// calls it), which cuts it into messages for Read: no extra pipe and
// goroutine between the pump and rod.
//
// The browser runs inside the sandbox, so what it says is untrusted: Read
// hands rod only messages of the shape rod decodes without panicking.
type pipeConn struct {
	wmu sync.Mutex
	w   io.WriteCloser // the browser's fd 3

	mu      sync.Mutex
	cond    *sync.Cond
	partial []byte   // the start of a message not yet ended
	msgs    [][]byte // whole messages not yet read
	queued  int      // bytes in msgs
	err     error    // set once the stream ended or broke
}

var _ cdp.WebSocketable = (*pipeConn)(nil)

func newPipeConn(w io.WriteCloser) *pipeConn {
	p := &pipeConn{w: w}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Send implements cdp.WebSocketable.
func (p *pipeConn) Send(msg []byte) error {
	if bytes.IndexByte(msg, 0) >= 0 {
		return errors.New("a DevTools message may not contain a NUL byte")
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	buf := make([]byte, len(msg)+1)
	copy(buf, msg)
	_, err := p.w.Write(buf)
	return err
}

// Write takes the browser's output. It blocks while more than maxMessage
// bytes wait to be read (rod reads all the time), and fails once the
// connection is closed, so the pump never hangs on it.
func (p *pipeConn) Write(b []byte) (int, error) {
	n := len(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.err == nil && p.queued > maxMessage {
		p.cond.Wait()
	}
	if p.err != nil {
		return 0, p.err
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			if len(p.partial)+len(b) > maxMessage {
				p.fail(fmt.Errorf("the browser sent a DevTools message over %d MiB", maxMessage>>20))
				return 0, p.err
			}
			p.partial = append(p.partial, b...)
			break
		}
		msg := b[:i]
		if len(p.partial) > 0 {
			msg = append(p.partial, msg...)
			p.partial = nil
		} else {
			msg = bytes.Clone(msg)
		}
		p.msgs = append(p.msgs, msg)
		p.queued += len(msg)
		b = b[i+1:]
	}
	p.cond.Broadcast()
	return n, nil
}

// fail ends the stream with err; p.mu is held.
func (p *pipeConn) fail(err error) {
	if p.err == nil {
		p.err = err
	}
	p.cond.Broadcast()
}

// EndOutput says the browser's output is over: Read answers io.EOF once
// the messages before it are read.
func (p *pipeConn) EndOutput() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail(io.EOF)
}

// message has the fields, and their types, that rod's cdp client decodes;
// a message that decodes into it decodes there too.
type message struct {
	ID        int             `json:"id"`
	SessionID string          `json:"sessionId"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     *cdp.Error      `json:"error"`
}

// Read implements cdp.WebSocketable. A message that is not a DevTools
// message ends the connection with an error, as a broken pipe would: the
// browser is then restarted.
func (p *pipeConn) Read() ([]byte, error) {
	p.mu.Lock()
	for len(p.msgs) == 0 && p.err == nil {
		p.cond.Wait()
	}
	if len(p.msgs) == 0 {
		err := p.err
		p.mu.Unlock()
		return nil, err
	}
	msg := p.msgs[0]
	p.msgs[0] = nil
	p.msgs = p.msgs[1:]
	p.queued -= len(msg)
	p.cond.Broadcast()
	p.mu.Unlock()
	if err := checkMessage(msg); err != nil {
		p.Close()
		return nil, err
	}
	return msg, nil
}

func checkMessage(msg []byte) error {
	if t := bytes.TrimLeft(msg, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errors.New("the browser sent a DevTools message that is not a JSON object")
	}
	var m message
	if err := json.Unmarshal(msg, &m); err != nil {
		return fmt.Errorf("the browser sent a malformed DevTools message: %w", err)
	}
	return nil
}

// Close ends both directions.
func (p *pipeConn) Close() error {
	p.mu.Lock()
	p.fail(errors.New("the connection to the browser is closed"))
	p.mu.Unlock()
	return p.w.Close()
}
