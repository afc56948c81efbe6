//! The crate's error type.

use std::path::{Path, PathBuf};

/// What can go wrong when writing a chart.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The embedded font could not be read (a build problem, not a data problem).
    #[error("the embedded chart font is not a readable TrueType font")]
    Font(#[source] ab_glyph::InvalidFont),
    /// A bar chart component does not have one value per category.
    #[error(
        "bar chart {}: component {component:?} has {values} values for {categories} categories",
        path.display()
    )]
    RaggedComponent {
        /// The chart's file.
        path: PathBuf,
        /// The component's name.
        component: String,
        /// How many values it has.
        values: usize,
        /// How many categories the chart has.
        categories: usize,
    },
    /// Drawing or writing the image failed (e.g. the folder does not exist, or the
    /// extension is not an image format).
    #[error("rendering chart {}", path.display())]
    Render {
        /// The chart's file.
        path: PathBuf,
        /// The bitmap backend's error (an I/O or image-encoding error underneath).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A drawing error before it is tied to the chart's file.
#[derive(Debug)]
pub(crate) struct DrawError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl DrawError {
    /// The public error, naming `path`.
    pub(crate) fn at(self, path: &Path) -> Error {
        Error::Render {
            path: path.to_path_buf(),
            source: self.0,
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for DrawError {
    fn from(e: E) -> Self {
        Self(Box::new(e))
    }
}

/// What the drawing code returns.
pub(crate) type DrawResult<T = ()> = std::result::Result<T, DrawError>;
