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

import os
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
        try:
            self._stream.write(printable(text, self._colours))
        except BrokenPipeError:
            reader_gone()
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            reader_gone()

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


# `gpuledger events replay | head`: once the reader has gone, stop at once and quietly, as `cat`
# does (exit 141, a shell's 128 + SIGPIPE). Before (session 32), a BrokenPipeError unwound through
# the log reader's async generators and printed three tracebacks. `up` keeps its own shutdown (its
# children must be stopped): it turns this off.
EXIT_WHEN_READER_GONE = True


def reader_gone() -> None:
    if not EXIT_WHEN_READER_GONE:
        raise BrokenPipeError(32, "Broken pipe")
    try:  # nothing more reaches the pipe, not even Python's own flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, AttributeError, ValueError):
        pass
    os._exit(141)


def install() -> None:
    """Wrap sys.stdout (once) for the rest of this command."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
