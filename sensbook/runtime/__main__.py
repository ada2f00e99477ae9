"""``python -m sensbook.runtime index DIR ...``: write each store's ``DIR/index.json``, the keys
it holds per experiment (:func:`sensbook.runtime.published.write_index`; the publish workflow
runs it on the store it ships); the default DIR and a relative DIR are read as ``sensbook sweep
--out`` reads them (:func:`sensbook.runtime.store.results_dir`: relative to the book's root,
default ``$SENSBOOK_RESULTS``, else ``results/``). A ``__main__`` of its own: running ``published`` itself with
``-m`` made Python warn that the module was already imported (``import sensbook`` imports it)."""
import sys

from .published import write_index
from .store import results_dir


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "index":
        print("usage: python -m sensbook.runtime index [DIR ...]   (default DIR: "
              "$SENSBOOK_RESULTS, else results/; a relative DIR is relative to the book's root, "
              "as sensbook sweep --out)", file=sys.stderr)
        return 2
    for folder in argv[1:] or [None]:
        try:
            print(f"wrote {write_index(results_dir(folder))}")
        except (ValueError, OSError) as e:               # one line, no traceback
            print(f"python -m sensbook.runtime index: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
