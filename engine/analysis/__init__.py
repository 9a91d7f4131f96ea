"""Built-in analysis: solo metrics, paired lift, help/harm, tiers and statistical tests."""
