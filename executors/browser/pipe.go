package browser

import (
	"bufio"
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
// The browser runs inside the sandbox, so what it says is untrusted: Read
// hands rod only messages of the shape rod decodes without panicking.
type pipeConn struct {
	wmu sync.Mutex
	w   io.WriteCloser
	r   *bufio.Reader
	c   io.Closer // the read side, closed by Close
}

var _ cdp.WebSocketable = (*pipeConn)(nil)

func newPipeConn(w io.WriteCloser, r io.ReadCloser) *pipeConn {
	return &pipeConn{w: w, r: bufio.NewReaderSize(r, 64<<10), c: r}
}

// Send implements cdp.WebSocketable.
func (p *pipeConn) Send(msg []byte) error {
	if bytes.IndexByte(msg, 0) >= 0 {
		return errors.New("a DevTools message may not contain a NUL byte")
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if _, err := p.w.Write(msg); err != nil {
		return err
	}
	_, err := p.w.Write([]byte{0})
	return err
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

// Read implements cdp.WebSocketable. A message that is too long or not a
// DevTools message ends the connection with an error, as a broken pipe
// would: the browser is then restarted.
func (p *pipeConn) Read() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := p.r.ReadSlice(0)
		if len(buf)+len(chunk) > maxMessage {
			return nil, fmt.Errorf("the browser sent a DevTools message over %d MiB", maxMessage>>20)
		}
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF {
				return nil, io.EOF
			}
			return nil, err
		}
		break
	}
	buf = buf[:len(buf)-1]
	if t := bytes.TrimLeft(buf, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("the browser sent a DevTools message that is not a JSON object")
	}
	var m message
	if err := json.Unmarshal(buf, &m); err != nil {
		return nil, fmt.Errorf("the browser sent a malformed DevTools message: %w", err)
	}
	return buf, nil
}

// Close ends both directions.
func (p *pipeConn) Close() error {
	return errors.Join(p.w.Close(), p.c.Close())
}
