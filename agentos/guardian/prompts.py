"""Recognising, on a captured pane, that an agent CLI is waiting for a person's input.

Claude Code, Gemini CLI and Codex stop at permission dialogs ("Do you want to proceed?",
"Allow execution?", "Allow command?") and at their empty input box. Such an agent is
*waiting*, not stuck: nudging it would type into the dialog. Only the bottom of the
screen counts (a prompt that has scrolled up was answered), and a screen that says the
agent is busy ("esc to interrupt") is never waiting. Lines are compared as tmux captures
them without ``-e``: plain text, no escape sequences.
"""

from __future__ import annotations

import re

TAIL_LINES = 15  # non-blank lines from the bottom of the pane that are examined

_BUSY = ("esc to interrupt", "ctrl+c to interrupt", "esc to cancel generation")

# Text that appears in a waiting screen of each CLI (matched as substrings).
_DIALOGS: dict[str, tuple[str, ...]] = {
    "claude-code": (
        "Do you want to proceed?",
        "Do you want to make this edit",
        "Do you want to create",
        "No, and tell Claude what to do differently",
        "Do you trust the files in this folder?",
        "? for shortcuts",
    ),
    "gemini-cli": (
        "Allow execution",
        "Apply this change?",
        "Yes, allow once",
        "Waiting for user confirmation",
        "Type your message or @path",
    ),
    "codex": (
        "Allow command?",
        "Would you like to run the following command?",
        "Yes, proceed",
        "Ask Codex to do anything",
        "Press Enter to confirm",
    ),
}

# An input line holding only the CLI's prompt glyph (U+276F or > for Claude, U+203A for
# Codex), perhaps inside the input box's borders.
_INPUT_LINE = {
    "claude-code": re.compile(r"^[│|]?\s*[>❯]\s*[│|]?$"),
    "gemini-cli": re.compile(r"^[│|]?\s*>\s*[│|]?$"),
    "codex": re.compile(r"^[▌│|]?\s*›\s*$"),
}

# Any program, any runtime: an explicit yes/no question at the bottom of the screen.
_YES_NO = re.compile(
    r"\((?:y/n|yes/no)\)|\[(?:y/n|yes/no)\]|press enter to continue", re.IGNORECASE
)

RUNTIMES = tuple(_DIALOGS)


def detect_prompt(screen: str, runtime: str | None = None) -> str | None:
    """The name of the program whose input prompt ends ``screen``, or None.

    ``runtime`` narrows the search to that CLI's prompts; any other runtime (a shell or
    python agent may drive one of these CLIs itself) or None tries them all. A yes/no
    question at the very bottom is recognised for every runtime.
    """
    lines = [line.strip() for line in screen.splitlines() if line.strip()][-TAIL_LINES:]
    if not lines:
        return None
    tail = "\n".join(lines)
    lowered = tail.lower()
    if any(marker in lowered for marker in _BUSY):
        return None
    names = (runtime,) if runtime in _DIALOGS else RUNTIMES
    for name in names:
        if any(text in tail for text in _DIALOGS[name]):
            return name
        if any(_INPUT_LINE[name].match(line) for line in lines[-5:]):
            return name
    if any(_YES_NO.search(line) for line in lines[-3:]):
        return "yes/no"
    return None
