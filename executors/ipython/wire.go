package ipython

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The Jupyter messaging protocol (v5) on the wire: a multipart ZeroMQ
// message of the delimiter, the HMAC-SHA256 signature of the next four
// frames, then header, parent header, metadata and content as JSON.
const delimiter = "<IDS|MSG>"

// header is a message's header.
type header struct {
	MsgID    string `json:"msg_id"`
	Username string `json:"username"`
	Session  string `json:"session"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// message is one decoded message.
type message struct {
	Header   header
	Parent   header
	Content  json.RawMessage
	Metadata json.RawMessage
}

// signer signs and checks messages with the kernel's key.
type signer struct {
	key     []byte
	session string
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s signer) sign(frames ...[]byte) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, f := range frames {
		m.Write(f)
	}
	return []byte(hex.EncodeToString(m.Sum(nil)))
}

// encode builds a request of msgType with content.
func (s signer) encode(msgType string, content any) (zmq4.Msg, string, error) {
	h := header{
		MsgID: newID(), Username: "sandboxd", Session: s.session,
		Date: time.Now().UTC().Format(time.RFC3339Nano), MsgType: msgType, Version: "5.3",
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return zmq4.Msg{}, "", err
	}
	cb, err := json.Marshal(content)
	if err != nil {
		return zmq4.Msg{}, "", err
	}
	parent, meta := []byte("{}"), []byte("{}")
	return zmq4.NewMsgFrom([]byte(delimiter), s.sign(hb, parent, meta, cb), hb, parent, meta, cb), h.MsgID, nil
}

// decode checks and parses a received message (identities or an iopub
// topic may come before the delimiter).
func (s signer) decode(m zmq4.Msg) (message, error) {
	i := 0
	for i < len(m.Frames) && string(m.Frames[i]) != delimiter {
		i++
	}
	f := m.Frames[min(i+1, len(m.Frames)):]
	if i == len(m.Frames) || len(f) < 5 {
		return message{}, errors.New("not a Jupyter message")
	}
	if !hmac.Equal(bytes.ToLower(f[0]), s.sign(f[1], f[2], f[3], f[4])) {
		return message{}, errors.New("a message with a bad signature")
	}
	var msg message
	if err := json.Unmarshal(f[1], &msg.Header); err != nil {
		return message{}, fmt.Errorf("message header: %w", err)
	}
	_ = json.Unmarshal(f[2], &msg.Parent)
	msg.Metadata, msg.Content = f[3], f[4]
	return msg, nil
}
