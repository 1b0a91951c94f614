# STAND-IN made by a3rl's simulator: builds this source archive's pure-Python wheel.
import base64, hashlib, os, zipfile

NAME, VERSION = "{dist}", "{version}"
HERE = os.path.dirname(os.path.abspath(__file__))
TAGS = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _read(name):
    with open(os.path.join(HERE, name), "rb") as f:
        return f.read()


def _hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "sha256=" + digest.rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = NAME + "-" + VERSION + ".dist-info"
    files = {{NAME + ".py": _read(NAME + ".py"), info + "/METADATA": _read("PKG-INFO"),
              info + "/WHEEL": TAGS}}
    record = "".join(n + "," + _hash(d) + "," + str(len(d)) + "\n"
                     for n, d in files.items())
    files[info + "/RECORD"] = (record + info + "/RECORD,,\n").encode()
    wheel = NAME + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
        for n, d in files.items():
            z.writestr(zipfile.ZipInfo(n, {date}), d)
    return wheel


def get_requires_for_build_wheel(config_settings=None):
    return []
