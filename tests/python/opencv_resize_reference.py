"""OpenCV's resize, the reference of tests/test_bevt_data.cc (BEVT's Lanczos tokenizer copy).

Usage: /usr/bin/python3 opencv_resize_reference.py DIR

Reads DIR/image.npy (uint8 [h, w, 3]) and DIR/size.npy ([oh, ow]); writes DIR/ref.npy, the image
resized by cv2.resize(..., interpolation=cv2.INTER_LANCZOS4) (what mmcv.imresize calls for
BEVT's CopyResize 'lanczos'), uint8 [oh, ow, 3].
"""
import os
import sys

try:
    import cv2
    import numpy as np
except ImportError as e:
    print(f"opencv_resize_reference.py: {e}", file=sys.stderr)
    sys.exit(77)

d = sys.argv[1]
img = np.load(os.path.join(d, "image.npy"))
oh, ow = [int(v) for v in np.load(os.path.join(d, "size.npy"))]
np.save(os.path.join(d, "ref.npy"), cv2.resize(img, (ow, oh), interpolation=cv2.INTER_LANCZOS4))
