"""A file's previous contents, for the tests that a failing write leaves it as it was."""

import os

OLD = "previous contents\n"
BAD_TEXT = "# a report\n" * 1000 + "\udc80"  # a lone surrogate: encoding fails mid-write


def old_file(tmp_path, name, data=OLD):
    """A file ``name`` in ``tmp_path`` holding ``data`` (text or bytes)."""
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def unchanged(path, data=OLD):
    """The file still holds ``data``, and no temporary file was left beside it."""
    assert (path.read_bytes() if isinstance(data, bytes) else path.read_text()) == data
    assert sorted(os.listdir(path.parent)) == [path.name], "a temporary file was left behind"
