"""MkDocs hook: Sphinx roles in the docstrings (``:func:`nmt.x.f` ``, ``:class:`~nmt.x.C` ``) become links.

The docstrings are Google style with Sphinx cross-reference roles, which mkdocstrings renders as the role's
name followed by the code. This hook turns each one into an optional cross-reference for mkdocs-autorefs: a
link when the name is an object of the API reference, the plain code otherwise (no warning).
"""

import re

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):<code>~?([\w.]+)</code>")


def on_page_content(html, page, config, files):
    """Replace the roles in a page's HTML before autorefs resolves the cross-references."""
    def link(match):
        name = match[1]
        return f'<autoref identifier="{name}" optional><code>{name}</code></autoref>'

    return ROLE.sub(link, html)
