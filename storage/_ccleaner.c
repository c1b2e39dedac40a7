/* Placeholder: filled in by the module's owner. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ccleaner", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__ccleaner(void) { return PyModule_Create(&module); }
