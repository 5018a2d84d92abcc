"""The self-test the style checks share: write a small tree with known violations into a temp dir,
run the check on it, and name every expected problem it missed and every problem it made up."""
import os
import tempfile


def self_test(tree, expected, check, prefix):
    """tree: {relative path: text}; expected: prefixes of the problems check(root) must report."""
    with tempfile.TemporaryDirectory(prefix=prefix) as root:
        for path, text in tree.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(root)
    missing = [e for e in expected if not any(p.startswith(e) for p in found)]
    extra = [p for p in found if not any(p.startswith(e) for e in expected)]
    return [f"self-test: not reported: {m}" for m in missing] + [f"self-test: reported wrongly: {x}" for x in extra]
