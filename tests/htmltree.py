"""A parsed HTML fragment for page tests (stdlib only): find elements by class or id and read
their text, instead of matching substrings of the markup."""

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list = field(default_factory=list)  # Elements and strings

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def text(self) -> str:
        """The text content, whitespace collapsed (once, as a browser's textContent shows it:
        `2<span> comments</span>` is "2 comments")."""
        return " ".join(self._raw_text().split())

    def _raw_text(self) -> str:
        return "".join(c._raw_text() if isinstance(c, Element) else c for c in self.children)

    def iter(self):
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.iter()

    def find_all(
        self, cls: str | None = None, *, tag: str | None = None, text: str | None = None, **attrs
    ) -> list:
        """Descendants with that class (and tag, text contained in theirs, and attribute values;
        `data_x` = `data-x`, `for_` = `for`)."""
        wanted = {name.rstrip("_").replace("_", "-"): value for name, value in attrs.items()}
        return [
            el
            for el in self.iter()
            if (cls is None or cls in el.classes)
            and (tag is None or el.tag == tag)
            and (text is None or text in el.text)
            and all(el.attrs.get(name) == value for name, value in wanted.items())
        ]

    def find(self, cls: str | None = None, **kwargs) -> "Element | None":
        found = self.find_all(cls, **kwargs)
        return found[0] if found else None

    def by_id(self, element_id: str) -> "Element | None":
        return self.find(id=element_id)


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag):
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(markup: str) -> Element:
    builder = _Builder()
    builder.feed(markup)
    builder.close()
    return builder.root
