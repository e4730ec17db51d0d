"""The library (zoo) never imports the trainer (training)."""

import subprocess
import sys


def test_library_does_not_import_the_trainer():
    code = (
        "import sys, zoo, zoo.cli, zoo.judges, zoo.pipeline, zoo.synthetic, zoo.convert;"
        "import zoo.methods.dbaf, zoo.methods.hford, zoo.methods.ifadit, zoo.methods.personal, zoo.methods.ideudemon;"
        "import zoo.face3d.shape_space, zoo.nn.sface, zoo.nn.dcgan, zoo.nn.mobilestylegan, zoo.nn.faceres, zoo.convert.tfjs_graph, zoo.inversion;"
        "zoo.convert.list_converters();"
        "bad = sorted(m for m in sys.modules if m == 'training' or m.startswith('training.'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
