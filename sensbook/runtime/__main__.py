"""``python -m sensbook.runtime index DIR ...``: write each store's ``DIR/index.json``, the keys
it holds per experiment (:func:`sensbook.runtime.published.write_index`; the publish workflow
runs it on the store it ships). A ``__main__`` of its own: running ``published`` itself with
``-m`` made Python warn that the module was already imported (``import sensbook`` imports it)."""
import sys

from .published import write_index


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "index":
        print("usage: python -m sensbook.runtime index [DIR ...]   (default DIR: results)",
              file=sys.stderr)
        return 2
    for folder in argv[1:] or ["results"]:
        try:
            print(f"wrote {write_index(folder)}")
        except (ValueError, OSError) as e:               # one line, no traceback
            print(f"python -m sensbook.runtime index: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
