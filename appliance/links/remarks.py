"""The display name of a link, from the `remarkModel` setting.

Client apps show the fragment of a share link (or the `ps` of a VMess link, the `name`
of a Mihomo proxy, the `remarks` of a JSON config) as the server's name, so one template
decides it everywhere. The template is a short string:

- its first character is the separator placed between the parts;
- every following letter adds one part, in the order written:
  `i` the inbound's remark, `e` the client's email, `o` other information about this
  particular link (the host's remark, or the remark of a legacy external proxy).

Parts that are empty are left out, so no doubled or dangling separators appear. Unknown
letters are ignored. An empty template means the default "-ieo": with inbound "Germany",
client "alice" and host "CDN", the remark is "Germany-alice-CDN".
"""

from __future__ import annotations

DEFAULT_REMARK_MODEL = "-ieo"


def render_remark(model: str, inbound_remark: str, email: str, other: str) -> str:
    """The remark for one link; see the module docstring for the template."""
    template = model if isinstance(model, str) and model else DEFAULT_REMARK_MODEL
    separator, letters = template[0], template[1:]
    values = {"i": inbound_remark, "e": email, "o": other}
    parts = [values[letter] for letter in letters if letter in values]
    return separator.join(part for part in parts if part)
