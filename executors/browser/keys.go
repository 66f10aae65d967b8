package browser

import (
	"strings"
	"unicode/utf8"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/input"

	"github.com/sandboxd/sandboxd/api"
)

var keyBackspace = input.Backspace

// namedKeys are the key names press accepts (as in KeyboardEvent.key),
// matched ignoring case.
var namedKeys = map[string]input.Key{
	"enter": input.Enter, "return": input.Enter, "tab": input.Tab, "escape": input.Escape, "esc": input.Escape,
	"backspace": input.Backspace, "delete": input.Delete, "insert": input.Insert, "space": input.Space,
	"arrowup": input.ArrowUp, "arrowdown": input.ArrowDown, "arrowleft": input.ArrowLeft, "arrowright": input.ArrowRight,
	"up": input.ArrowUp, "down": input.ArrowDown, "left": input.ArrowLeft, "right": input.ArrowRight,
	"home": input.Home, "end": input.End, "pageup": input.PageUp, "pagedown": input.PageDown,
	"shift": input.ShiftLeft, "control": input.ControlLeft, "ctrl": input.ControlLeft,
	"alt": input.AltLeft, "meta": input.MetaLeft, "cmd": input.MetaLeft,
	"f1": input.F1, "f2": input.F2, "f3": input.F3, "f4": input.F4, "f5": input.F5, "f6": input.F6,
	"f7": input.F7, "f8": input.F8, "f9": input.F9, "f10": input.F10, "f11": input.F11, "f12": input.F12,
}

// keyPress is a key with the modifiers held while it is pressed, or text
// to insert (a character no US keyboard key types).
type keyPress struct {
	mods []input.Key
	key  input.Key
	text string
}

// parseKeys reads "Enter", "a", "Control+a", "Shift+Tab", "é".
func parseKeys(s string) (keyPress, error) {
	parts := strings.Split(s, "+")
	if strings.HasSuffix(s, "++") || s == "+" { // "Control++" presses "+"
		parts = append(strings.Split(strings.TrimSuffix(s, "++"), "+"), "+")
		if s == "+" {
			parts = []string{"+"}
		}
	}
	var kp keyPress
	for i, part := range parts {
		last := i == len(parts)-1
		k, ok := namedKeys[strings.ToLower(part)]
		if !ok && utf8.RuneCountInString(part) == 1 {
			r, _ := utf8.DecodeRuneInString(part)
			if r < 0x80 && r >= 0x20 {
				k, ok = input.Key(r), true
			} else if last && len(kp.mods) == 0 {
				kp.text = part
				return kp, nil
			}
		}
		if !ok {
			return keyPress{}, api.Errorf(api.ErrInvalidArgument, "unknown key %q in %q: use a name such as Enter, Tab, Escape, Backspace, ArrowDown, PageDown, F5, a single character, or modifiers joined with +, as in Control+a", part, s)
		}
		if last {
			kp.key = k
		} else {
			kp.mods = append(kp.mods, k)
		}
	}
	return kp, nil
}

func (kp keyPress) press(p *rod.Page) error {
	if kp.text != "" {
		return p.InsertText(kp.text)
	}
	return p.KeyActions().Press(kp.mods...).Type(kp.key).Do()
}
