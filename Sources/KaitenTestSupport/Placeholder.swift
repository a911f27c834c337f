public enum KaitenTestSupportPlaceholder {}
