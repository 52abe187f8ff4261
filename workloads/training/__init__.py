"""PyTorch training on the emulated fabric: workers, models and data, the runner, results,
reports and the demo."""
