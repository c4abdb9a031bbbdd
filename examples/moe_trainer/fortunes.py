"""fortunes.py: the trainer's corpus as data.cc reads it (stdlib only; twin.py and
ngram_baseline.py share it): every fortune of the collections in /usr/share/games/fortunes
(regular files in name order; .dat indexes, .u8 links and dot files skipped), each ended by
"%\\n", fortune i to the validation text when i % 20 == 0 and to the training text otherwise.
"""
import os


def fortunes_split(directory):
    """Returns (train, val) bytes, byte for byte FortunesData::Load's."""
    train, val, count = bytearray(), bytearray(), 0
    names = sorted(n for n in os.listdir(directory)
                   if not n.startswith(".") and not n.endswith((".dat", ".u8")))
    for name in names:
        path = os.path.join(directory, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()  # std::getline yields no empty line after the last newline
        fortune = bytearray()
        for line in lines + [b"%"]:  # the trailing "%" finishes the file's last fortune
            if line == b"%":
                if fortune:
                    (val if count % 20 == 0 else train).extend(fortune + b"%\n")
                    count += 1
                    fortune = bytearray()
            else:
                fortune += line + b"\n"
    return bytes(train), bytes(val)
