"""Print what configure needs to know about a Python interpreter.

usage: python3 pyconfig.py include|ext_suffix|platlib
platlib is the interpreter's platform site directory with its installation
prefix replaced by ${exec_prefix}, so that make install follows --prefix
(Debian's /usr/bin/python3: ${exec_prefix}/lib/python3.11/dist-packages).
"""
import sys
import sysconfig

what = sys.argv[1] if len(sys.argv) > 1 else ""
if what == "include":
    print(sysconfig.get_path("include"))
elif what == "ext_suffix":
    print(sysconfig.get_config_var("EXT_SUFFIX"))
elif what == "platlib":
    path = sysconfig.get_path("platlib")
    for prefix in ("/usr/local", sys.exec_prefix):
        if path.startswith(prefix + "/"):
            path = "${exec_prefix}" + path[len(prefix):]
            break
    print(path)
else:
    sys.exit(__doc__)
