# Writes the .npy and .npz files the NumPy reader tests read, with real NumPy
# (Debian's python3-numpy): python3 make_npy.py DIR
import sys, numpy as np
d = sys.argv[1]
x = (np.arange(24, dtype=np.float32) / 4 - 1).reshape(6, 2, 2)
y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int64)
np.save(f"{d}/x_f4.npy", x)
np.save(f"{d}/x_f8.npy", x.astype(np.float64))
np.save(f"{d}/x_u1.npy", np.arange(12, dtype=np.uint8).reshape(3, 4))
np.save(f"{d}/x_be.npy", x.astype(">f4"))
np.save(f"{d}/x_fortran.npy", np.asfortranarray(x.reshape(6, 4)))
np.save(f"{d}/x_v2.npy", x)  # rewritten below as format 2.0
with open(f"{d}/x_v2.npy", "wb") as f:
    np.lib.format.write_array(f, x, version=(2, 0))
np.save(f"{d}/y_i8.npy", y)
np.save(f"{d}/y_neg.npy", np.array([0, 1, -1, 0, 1, 2], dtype=np.int32))
np.save(f"{d}/y_f4.npy", y.astype(np.float32))
np.save(f"{d}/y_short.npy", y[:5])
np.save(f"{d}/structured.npy", np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]))
np.save(f"{d}/scalar.npy", np.float32(3.5))
np.savez(f"{d}/xy.npz", x=x, y=y)
np.savez_compressed(f"{d}/xy_compressed.npz", x=x, y=y)
