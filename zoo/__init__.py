"""Face de-identification zoo: five published methods and classical baselines behind one API.

from zoo import load
m = load("blur")
result = m.anonymize("photo.jpg", key="my secret")
result.image.save("out.png"); print(result.report())
"""

from .keys import KeyMaterial, Secret, new_secret
from .registry import info, list_methods, load, register_method

__all__ = ["load", "list_methods", "info", "register_method", "new_secret", "Secret", "KeyMaterial"]
__version__ = "0.2.0"
