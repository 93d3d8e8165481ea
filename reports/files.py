"""The scripts' files: inputs read only from regular files, outputs written whole or not at all."""
import errno
import os
import stat


def read_regular_file(path, limit=None):
    """The bytes of `path`, which must be a regular file. A FIFO is opened without blocking and a
    device is never read, so `/dev/zero` or a pipe nobody writes to is refused at once with an
    OSError whose strerror says so, as a missing file is. `limit`: refuse a file of more bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket")
            raise OSError(errno.EINVAL, f"not a regular file ({kind})")
        if limit is not None and st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


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
