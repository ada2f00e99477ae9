"""The book's extension, checked without a built site (issue 46): autodoc prints a default as
the source writes it, so `learn(..., protocol=Protocol(), ...)` does not print the whole
`Protocol(D=16, L=2, ...)` repr; computed figures link to their PNG (tap to enlarge)."""
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))


def test_the_extension_keeps_defaults_as_written(monkeypatch):
    import sensbook_site

    config = types.SimpleNamespace(html_static_path=[])
    monkeypatch.setattr(sensbook_site.site_assets, "site_assets", lambda: None)   # no npm
    monkeypatch.setenv("SENSBOOK_PAGE", "0")
    sensbook_site._ensure_assets(None, config)
    assert config.autodoc_preserve_defaults is True


def test_a_preserved_default_is_short():
    from sphinx.ext.autodoc.preserve_defaults import update_defvalue
    from sphinx.util.inspect import signature, stringify_signature

    import sensbook as sb

    before = stringify_signature(signature(sb.learn))
    assert "Protocol(D=16" in before                     # what the page printed
    app = types.SimpleNamespace(config=types.SimpleNamespace(autodoc_preserve_defaults=True))
    fn = sb.learn
    update_defvalue(app, fn, False)
    try:
        after = stringify_signature(signature(fn))
    finally:
        del fn.__signature__
    assert "Protocol = Protocol()," in after and "D=16" not in after, after


def test_computed_figures_link_to_their_png():
    """Issue 46: at 390 px figure text is 4-6 px; each computed figure opens at full size."""
    import sensbook_site

    fig = '<figure><img alt="_images/a.png" src="../_images/a_1.png" /></figure>'
    out = sensbook_site.enlarge_links(fig)
    assert '<a class="sensbook-enlarge" href="../_images/a_1.png"' in out
    assert out.count("<img") == 1 and out.endswith("</a></figure>")
    linked = '<a class="reference internal image-reference" href="x.png"><img src="_images/x.png"></a>'
    assert sensbook_site.enlarge_links(linked) == linked
    explorer = '<img class="sx-figure" src="data:image/png;base64,AAAA">'
    assert sensbook_site.enlarge_links(explorer) == explorer
