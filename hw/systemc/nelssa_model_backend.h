// The model device (hw/model/device.py: its data path in Python, its timing the compiled cycle
// model hw/model/device_cycle.cpp) as a Backend of nelssa_device_tlm.h, through an embedded
// CPython: for LooseDevice, the loosely-timed form. The interpreter is the one named by
// $NELSSA_PYTHON (a virtual environment's python, with the nelssa package installed), started
// here unless the process has one; hw/sim/systemc.py ModelBackend is its other half.
#ifndef NELSSA_MODEL_BACKEND_H
#define NELSSA_MODEL_BACKEND_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "nelssa_device_tlm.h"

namespace nelssa {

class ModelBackend : public Backend {
 public:
  explicit ModelBackend(int engines) {
    if (!Py_IsInitialized()) start();
    PyObject* mod = check(PyImport_ImportModule("nelssa.hw.sim.systemc"));
    obj_ = check(PyObject_CallMethod(mod, "ModelBackend", "i", engines));
    Py_DECREF(mod);
  }
  ~ModelBackend() override { Py_XDECREF(obj_); }

  void push(const std::vector<uint8_t>& m) override {
    drop(PyObject_CallMethod(obj_, "push", "y#", reinterpret_cast<const char*>(m.data()),
                             static_cast<Py_ssize_t>(m.size())));
  }
  int pop(uint8_t* buf, uint32_t cap) override {
    PyObject* r = check(PyObject_CallMethod(obj_, "pop", nullptr));
    const Py_ssize_t n = PyBytes_Size(r);
    if (n > static_cast<Py_ssize_t>(cap)) n_too_long(r);
    std::memcpy(buf, PyBytes_AsString(r), n);
    Py_DECREF(r);
    return static_cast<int>(n);
  }
  void run(uint64_t cycles) override {
    drop(PyObject_CallMethod(obj_, "run", "K", static_cast<unsigned long long>(cycles)));
  }
  bool quiet() override { return number("quiet") != 0; }
  uint64_t run_until_quiet() override { return number("run_until_quiet"); }
  uint64_t cycle() override { return number("cycle"); }
  void image(std::vector<long long>& addr, std::vector<uint8_t>& data, bool& keyed) override {
    PyObject* r = check(PyObject_CallMethod(obj_, "image", nullptr));
    PyObject* a = PyTuple_GetItem(r, 0);
    PyObject* d = PyTuple_GetItem(r, 1);
    addr.resize(PyBytes_Size(a) / 8);
    std::memcpy(addr.data(), PyBytes_AsString(a), addr.size() * 8);
    data.assign(PyBytes_AsString(d), PyBytes_AsString(d) + PyBytes_Size(d));
    Py_DECREF(r);
    keyed = false;
  }

 private:
  PyObject* obj_ = nullptr;

  static void start() {
    const char* exe = std::getenv("NELSSA_PYTHON");
    if (!exe) throw std::runtime_error("set NELSSA_PYTHON to the python that has nelssa");
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    PyStatus s = PyConfig_SetBytesString(&config, &config.executable, exe);
    if (!PyStatus_Exception(s)) s = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(s)) throw std::runtime_error(std::string("python: ") + s.err_msg);
  }
  static PyObject* check(PyObject* r) {
    if (!r) {
      PyErr_Print();
      throw std::runtime_error("the model backend raised (its traceback is above)");
    }
    return r;
  }
  static void drop(PyObject* r) { Py_DECREF(check(r)); }
  [[noreturn]] static void n_too_long(PyObject* r) {
    Py_DECREF(r);
    throw std::runtime_error("model message larger than the buffer");
  }
  uint64_t number(const char* method) {
    PyObject* r = check(PyObject_CallMethod(obj_, method, nullptr));
    const uint64_t v = PyLong_AsUnsignedLongLong(r);
    Py_DECREF(r);
    return v;
  }
};

}  // namespace nelssa

#endif  // NELSSA_MODEL_BACKEND_H
