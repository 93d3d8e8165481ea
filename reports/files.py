"""Writing the scripts' output files: whole or not at all."""
import os


def write_atomically(path, text):
    """Writes `text` to `path` through a temporary file beside it, so a reader (or a crash) never
    sees half of it."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
