"""What the CLI prints comes partly from other people: a release's `reason` written by a publishing
system, a node agent's product names and labels, a claim's labels. Such a string holding terminal
control sequences (an OSC that retitles the window or writes the clipboard, a CSI that clears the
screen or moves the cursor to forge lines, a bare carriage return) was printed as it came by
`claim get|list|explain` and `events tail|replay` (session 30), and an operator's terminal obeyed
it. Every write to stdout passes here: control characters are printed as `\\xNN`, except newlines
and tabs, and, on a terminal, the colour sequences (SGR, `ESC [ ... m`) that rich draws tables with;
characters that reorder or hide text (bidi overrides, zero-width) as `\\uNNNN` (session 32).
JSON output is untouched (json.dumps writes every control character as `\\u00NN`); stderr, where
rich's progress bars move the cursor, carries only the CLI's own words."""

from __future__ import annotations

import re
import sys

# and the invisible characters that reorder or hide text (session 32): bidirectional overrides,
# embeddings and isolates (a reason holding U+202E shows its words backwards, "Trojan Source"),
# zero-width characters, the byte-order mark, line and paragraph separators
_CONTROL = re.compile("\x1b\\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f"
                      "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def printable(text: str, colours: bool = False) -> str:
    """`text` with its control characters shown as `\\xNN`; colour sequences kept when `colours`."""
    def shown(match: re.Match) -> str:
        found = match.group()
        if len(found) > 1:  # a colour sequence
            return found if colours else "\\x1b" + found[1:]
        code = ord(found)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _CONTROL.sub(shown, text)


class SafeStream:
    """A text stream that writes `printable(text)` to the stream it wraps (all else forwarded)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        try:
            self._colours = bool(stream.isatty())
        except (AttributeError, ValueError):
            self._colours = False

    def write(self, text: str) -> int:
        self._stream.write(printable(text, self._colours))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def install() -> None:
    """Wrap sys.stdout (once) for the rest of this command."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
